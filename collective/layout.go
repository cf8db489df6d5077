package collective

import (
	"math"
	"sort"

	"github.com/hetsync/hetsync/topology"
)

// layout is what the planner reads from a link matrix: the ranks of every host, the hosts
// grouped into well-connected groups (racks), and orders of ranks and hosts that keep a host's
// ranks, then a group's hosts, together. It is a pure function of the matrix, so every rank
// that holds the same matrix derives the same layout.
type layout struct {
	// m is the full matrix when the layout was read from one (the replay needs it), nil when
	// it was read from a host-level description only; hm is the host-level description.
	m        *topology.Matrix
	hm       *topology.HostMatrix
	p        int
	hosts    [][]int     // ranks of each host, in rank order
	groups   [][]int     // hosts of each group, in the order a ring visits them
	hostBeta [][]float64 // fastest link between two hosts' ranks, each direction
}

// minGroupJump is the smallest factor between two consecutive link speeds that separates two
// tiers of the network (hosts of one rack, racks); see groupCut.
const minGroupJump = 2.0

func newLayout(m *topology.Matrix) *layout {
	l := newHostLayout(m.HostLevel())
	l.m = m
	return l
}

// newHostLayout is the layout of a host-level description: O(H²) in the number of hosts,
// so that a planner of thousands of ranks never reads P² links.
func newHostLayout(hm *topology.HostMatrix) *layout {
	l := &layout{hm: hm, p: hm.P, hosts: make([][]int, hm.Hosts())}
	for r, h := range hm.Host {
		l.hosts[h] = append(l.hosts[h], r)
	}
	nh := len(l.hosts)
	l.hostBeta = make([][]float64, nh)
	for h := range l.hostBeta {
		l.hostBeta[h] = make([]float64, nh)
		for g := range l.hostBeta[h] {
			l.hostBeta[h][g] = hm.Links[h][g].Beta
		}
		// Today's meaning of the diagonal: the fastest link between two ranks of the host,
		// +Inf for a host of one rank (nothing reads it but the sums below skip it).
		l.hostBeta[h][h] = math.Inf(1)
		if len(l.hosts[h]) > 1 {
			l.hostBeta[h][h] = hm.Local[h].Beta
		}
	}
	cut := groupCut(l.hostLinks())
	// Groups are the connected components of the links at or below the cut, each ordered by a
	// nearest-neighbour walk from its lowest host.
	group := make([]int, nh)
	for h := range group {
		group[h] = -1
	}
	var comps [][]int
	for h := range nh {
		if group[h] >= 0 {
			continue
		}
		id := len(comps)
		comp, stack := []int{}, []int{h}
		group[h] = id
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			comp = append(comp, x)
			for y := range nh {
				if group[y] < 0 && l.linkBeta(x, y) <= cut {
					group[y] = id
					stack = append(stack, y)
				}
			}
		}
		sort.Ints(comp)
		comps = append(comps, walk(comp, l.linkBeta))
	}
	// The groups themselves in a nearest-neighbour walk from the group of host 0, so that a
	// ring crosses each thin link between consecutive groups once.
	idx := make([]int, len(comps))
	for i := range idx {
		idx[i] = i
	}
	groupBeta := func(a, b int) float64 {
		v := math.Inf(1)
		for _, x := range comps[a] {
			for _, y := range comps[b] {
				v = math.Min(v, l.linkBeta(x, y))
			}
		}
		return v
	}
	for _, i := range walk(idx, groupBeta) {
		l.groups = append(l.groups, comps[i])
	}
	return l
}

// hostLinks lists the distinct values of linkBeta over the pairs of hosts: repeats cannot
// move groupCut's cut (their ratio is 1), and a network of a thousand hosts has half a million
// pairs but a handful of distinct links. The order is groupCut's business (it sorts).
func (l *layout) hostLinks() []float64 {
	seen := make(map[float64]bool)
	var out []float64
	last := math.NaN() // the previous pair's value: neighbours in a row mostly repeat it
	for h := range l.hosts {
		for g := h + 1; g < len(l.hosts); g++ {
			v := l.linkBeta(h, g)
			if v != last && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
			last = v
		}
	}
	return out
}

// groupCut is the slowest cost per byte of a link inside a group: the links sorted by cost,
// the cut goes in the largest jump between consecutive ones, when that jump is more than
// minGroupJump; otherwise every link is one tier and the cut takes them all. The largest jump,
// not a fixed factor over the fastest link, so that the noise of a measurement inside a tier
// (a rack's hosts read 2× apart) does not split the tier, while the step to the next tier
// (an uplink 10× slower) does. With three tiers or more the cut goes in the largest step, the
// first of equal ones (groups are then the tightest clusters, and the model's per-pair costs
// keep the rest).
func groupCut(links []float64) float64 {
	if len(links) == 0 {
		return 0
	}
	s := append([]float64(nil), links...)
	sort.Float64s(s)
	cut, jump := s[len(s)-1], minGroupJump
	for i := 1; i < len(s); i++ {
		ratio := 1.0
		switch {
		case s[i-1] > 0:
			ratio = s[i] / s[i-1]
		case s[i] > 0:
			ratio = math.Inf(1) // a free link, then a costly one
		}
		if ratio > jump {
			cut, jump = s[i-1], ratio
		}
	}
	return cut
}

// linkBeta is the slower direction of the fastest link between two hosts.
func (l *layout) linkBeta(h, g int) float64 { return max(l.hostBeta[h][g], l.hostBeta[g][h]) }

// walk orders items by a nearest-neighbour walk from the first under dist, ties to the earlier
// item.
func walk(items []int, dist func(a, b int) float64) []int {
	if len(items) == 0 {
		return nil
	}
	left := append([]int(nil), items[1:]...)
	out := []int{items[0]}
	for len(left) > 0 {
		cur, bi := out[len(out)-1], 0
		for i := 1; i < len(left); i++ {
			if dist(cur, left[i]) < dist(cur, left[bi]) {
				bi = i
			}
		}
		out = append(out, left[bi])
		left = append(left[:bi], left[bi+1:]...)
	}
	return out
}

// Orders of ranks (and of hosts, for the hierarchy's inter-host part).
const (
	orderRank        = "rank"        // rank order, whatever the placement
	orderGrouped     = "grouped"     // a host's ranks adjacent, a group's hosts adjacent
	orderInterleaved = "interleaved" // positions dealt round-robin over the groups
)

func orderNames() []string { return []string{orderRank, orderGrouped, orderInterleaved} }

// hostOrder lists the hosts grouped (group after group) or interleaved (one host of every
// group in turn, so that neighbours at odd distances are in different groups).
func (l *layout) hostOrder(order string) []int {
	var out []int
	switch order {
	case orderInterleaved:
		out = interleave(l.groups)
	case orderRank:
		for h := range l.hosts {
			out = append(out, h)
		}
	default:
		for _, g := range l.groups {
			out = append(out, g...)
		}
	}
	return out
}

// rankOrder lists the ranks in the named order. Grouped keeps each host's ranks together in
// the grouped host order; interleaved deals the grouped ranks of every group round-robin, so
// that a butterfly's last, smallest exchanges are the ones that cross groups.
func (l *layout) rankOrder(order string) []int {
	switch order {
	case orderRank:
		out := make([]int, l.p)
		for r := range out {
			out[r] = r
		}
		return out
	case orderInterleaved:
		per := make([][]int, len(l.groups))
		for i, g := range l.groups {
			for _, h := range g {
				per[i] = append(per[i], l.hosts[h]...)
			}
		}
		return interleave(per)
	}
	var out []int
	for _, h := range l.hostOrder(orderGrouped) {
		out = append(out, l.hosts[h]...)
	}
	return out
}

// interleave deals the lists round-robin: a[0][0], b[0][0], a[0][1], ... until all are used.
func interleave(lists [][]int) []int {
	var out []int
	for i := 0; ; i++ {
		took := false
		for _, x := range lists {
			if i < len(x) {
				out = append(out, x[i])
				took = true
			}
		}
		if !took {
			return out
		}
	}
}

// model is the replay network of the matrix: every pair at its own (α, β), and the messages
// between hosts crossing the sender's and receiver's host NICs (shared by their ranks, at the
// host's fastest link) and, between groups, the two groups' uplinks (shared by their hosts,
// at the fastest link that leaves the group).
func (l *layout) model() *netModel {
	if l.m == nil {
		l.m = l.hm.Matrix()
	}
	m, nh := l.m, len(l.hosts)
	hostOf := m.Host
	res, groupOf := l.resources()
	paths := make([][]int, m.P*m.P)
	for r := range m.P {
		for q := range m.P {
			h, g := hostOf[r], hostOf[q]
			if h == g {
				continue
			}
			path := []int{2 * h, 2*g + 1}
			if a, b := groupOf[h], groupOf[g]; a != b {
				path = append(path, 2*nh+2*a, 2*nh+2*b+1)
			}
			paths[r*m.P+q] = path
		}
	}
	return &netModel{
		alpha:   func(from, to int) float64 { return m.Links[from][to].Alpha },
		beta:    func(from, to int) float64 { return m.Links[from][to].Beta },
		path:    func(from, to int) []int { return paths[from*m.P+to] },
		resBeta: res,
	}
}

// resources are the shared resources of the model, each a time per byte: host h's NIC out
// (2h) and in (2h+1), at the host's fastest link, and group g's uplink out (2H+2g) and in
// (2H+2g+1), at the fastest link that leaves the group; 0 for one no message crosses. groupOf
// is each host's group.
func (l *layout) resources() (res []float64, groupOf []int) {
	nh := len(l.hosts)
	groupOf = make([]int, nh)
	for i, g := range l.groups {
		for _, h := range g {
			groupOf[h] = i
		}
	}
	ng := len(l.groups)
	res = make([]float64, 2*nh+2*ng)
	for i := range res {
		res[i] = math.Inf(1)
	}
	for h := range nh {
		for g := range nh {
			if h == g {
				continue
			}
			v := l.hostBeta[h][g]
			res[2*h] = min(res[2*h], v)
			res[2*g+1] = min(res[2*g+1], v)
			if a, b := groupOf[h], groupOf[g]; a != b {
				res[2*nh+2*a] = min(res[2*nh+2*a], v)
				res[2*nh+2*b+1] = min(res[2*nh+2*b+1], v)
			}
		}
	}
	for i := range res {
		if math.IsInf(res[i], 1) {
			res[i] = 0 // a resource no message crosses
		}
	}
	return res, groupOf
}
