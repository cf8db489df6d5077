package topology

// groupHosts turns every rank's proven verdicts (rows[r][q]: rank r proved that rank q shares
// its host) into host indices. Two ranks share a host only when each proved it of the other,
// and a rank joins the first host whose every member it shares with both ways, so a host is a
// set of ranks that all proved one another even when a verdict is missing somewhere.
// Host indices are dense and numbered in order of their lowest rank.
func groupHosts(rows [][]bool) []int {
	p := len(rows)
	host := make([]int, p)
	var members [][]int
	for r := range p {
		host[r] = -1
		for h, ms := range members {
			all := true
			for _, m := range ms {
				if !rows[r][m] || !rows[m][r] {
					all = false
					break
				}
			}
			if all {
				host[r] = h
				members[h] = append(members[h], r)
				break
			}
		}
		if host[r] < 0 {
			host[r] = len(members)
			members = append(members, []int{r})
		}
	}
	return host
}

// probePair is one measurement of a round: ranks A and B, A < B, ping-pong in both directions.
type probePair struct{ A, B int }

// measureRounds plans the measurement of a job whose ranks are on hosts host (dense indices):
// one round in which every host with two or more ranks measures its first two, then a
// round-robin tournament of the hosts (the circle method: H-1 rounds for an even number H of
// hosts, H rounds for an odd one, each host in at most one pair per round), each host
// represented by its lowest rank. No rank is in two pairs of a round, so a round's pairs run
// at once. Every rank computes the same plan from the same host indices.
func measureRounds(host []int) [][]probePair {
	var ranksOf [][]int
	for r, h := range host {
		for len(ranksOf) <= h {
			ranksOf = append(ranksOf, nil)
		}
		ranksOf[h] = append(ranksOf[h], r)
	}
	var rounds [][]probePair
	var local []probePair
	for _, rs := range ranksOf {
		if len(rs) >= 2 {
			local = append(local, probePair{rs[0], rs[1]})
		}
	}
	if len(local) > 0 {
		rounds = append(rounds, local)
	}
	n := len(ranksOf)
	if n < 2 {
		return rounds
	}
	slots := n + n%2 // an odd count gets a bye slot (index n): whoever meets it rests
	for round := range slots - 1 {
		var pairs []probePair
		for i := range slots / 2 {
			x, y := circleSlot(round, i, slots), circleSlot(round, slots-1-i, slots)
			if x >= n || y >= n {
				continue
			}
			a, b := ranksOf[x][0], ranksOf[y][0]
			pairs = append(pairs, probePair{min(a, b), max(a, b)})
		}
		rounds = append(rounds, pairs)
	}
	return rounds
}

// circleSlot is the host at position i of round `round` in the circle method over `slots`
// positions: position 0 stays, the others rotate by one each round.
func circleSlot(round, i, slots int) int {
	if i == 0 {
		return 0
	}
	return 1 + (i-1+round)%(slots-1)
}
