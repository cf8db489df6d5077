package collective

import "math"

// The costs of this file are summed host by host, not message by message: a parameter
// server's p·k flows and a hierarchy's pieces are O(p²) messages, but every rank of a host
// does the same, so a phase is priced in O(H²) from per-host totals.

// psNodes is a parameter server's nodes grouped by host: count[h] nodes on host h, each
// holding a shard of shard[h] elements and carrying lanes[h] copies of the exchange in turn.
type psNodes struct {
	count  []int
	shard  []float64
	lanes  []float64
	resMul float64
}

// psCost prices ps's allreduce: every node pushes every shard to its server, then pulls every
// reduced shard back. Reduce-scatter and allgather are not priced (+Inf): the planner leaves
// their ps forms to the replay of small jobs.
func psCost(c *coster, kind collKind, nodes psNodes) {
	if kind != kindAllReduce {
		c.addPhase(math.Inf(1), 0)
		return
	}
	net, nh := c.net, len(nodes.count)
	e := float64(c.elem)
	total := 0
	for _, k := range nodes.count {
		total += k
	}
	// Per group: nodes and the shards they hold.
	gNodes := net.byGroup(func(h int) float64 { return float64(nodes.count[h]) })
	gShard := net.byGroup(func(h int) float64 { return float64(nodes.count[h]) * nodes.shard[h] })
	ng := len(gNodes)
	nAll := 0.0
	for _, s := range gShard {
		nAll += s
	}
	// segs[h] is how many messages a shard of host h's servers takes.
	segs := make([]float64, nh)
	for h, sh := range nodes.shard {
		segs[h] = c.segments(int(math.Ceil(sh)))
	}
	sums := psHostSums(net, nodes, segs, e)
	for _, pull := range []bool{false, true} {
		t, msgs := 0.0, 0.0
		for h, x := range sums {
			if pull {
				t = max(t, nodes.lanes[h]*max(x.pullSend, x.pullRecv))
				msgs += x.pullMsgs * nodes.resMul
			} else {
				t = max(t, nodes.lanes[h]*max(x.pushSend, x.pushRecv))
				msgs += x.pushMsgs * nodes.resMul
			}
		}
		if net.res != nil {
			// Host h's NIC: out, its nodes' shards of the others (push) or its shards to
			// the others' nodes (pull); in, the reverse. Groups likewise.
			for h, k := range nodes.count {
				own := float64(k) * nodes.shard[h]
				out := float64(k) * (nAll - own)
				in := own * float64(total-k)
				if pull {
					out, in = in, out
				}
				t = math.Max(t, nodes.resMul*e*math.Max(out*net.res[2*h], in*net.res[2*h+1]))
			}
			for g := range ng {
				out := gNodes[g] * (nAll - gShard[g])
				in := gShard[g] * (float64(total) - gNodes[g])
				if pull {
					out, in = in, out
				}
				t = math.Max(t, nodes.resMul*e*math.Max(out*net.res[2*nh+2*g], in*net.res[2*nh+2*g+1]))
			}
		}
		c.addPhase(t, msgs)
	}
}

// placedPSNodes is the flat ps's nodes: every rank a server, its shard in proportion to its
// weight (placeServers).
func placedPSNodes(net *planNet, a paramServer, n int) psNodes {
	nh := len(net.hosts)
	nodes := psNodes{count: make([]int, nh), shard: make([]float64, nh), lanes: make([]float64, nh), resMul: 1}
	sum := 0.0
	for _, w := range a.weight {
		sum += w
	}
	for s, r := range a.place {
		h := net.hostOf[r]
		nodes.count[h]++
		w := 1.0 / float64(len(a.place))
		if a.weight != nil {
			w = a.weight[s] / sum
		}
		// Every server of a host has the same weight: the last one read is the host's.
		nodes.shard[h] = float64(n) * w
	}
	for h := range nodes.lanes {
		nodes.lanes[h] = 1
	}
	return nodes
}

// hierCost prices the hierarchy: the local reduce-scatter (or, for an allgather, the pieces'
// gather), the inter-host algorithm on every lane at once with hosts as nodes, and the local
// allgather (or, for a reduce-scatter, the pieces' scatter).
func hierCost(c *coster, kind collKind, h hierarchical, n int, hostIdentity []int) {
	m := h.lanes()
	le := (n + m - 1) / m
	switch kind {
	case kindAllReduce:
		localLanesCost(c, h, le)
	case kindAllGather:
		piecesCost(c, h, n)
	default:
		localLanesCost(c, h, le)
	}
	// Every host runs the inter-host algorithm on every lane at once: its busiest rank
	// carries ⌈m/k⌉ lanes in turn, and its NIC carries all m.
	nh := len(h.hosts)
	lanes := make([]float64, nh)
	for i, rs := range h.hosts {
		lanes[i] = math.Ceil(float64(m) / float64(len(rs)))
	}
	seg := c.seg
	c.setNodes(hostIdentity, lanes, float64(m))
	switch h.inter.(type) {
	case ring:
		c.seg = ringSegment(seg, le, len(h.hostOrder), c.elem)
		ringCost(c, kind, h.hostOrder, le)
	case butterfly:
		butterflyCost(c, kind, h.hostOrder, le, false)
	case binaryBlocks:
		binaryBlocksCost(c, kind, h.hostOrder, le)
	case paramServer:
		nodes := psNodes{count: make([]int, nh), shard: make([]float64, nh), lanes: lanes, resMul: float64(m)}
		for i := range nodes.count {
			nodes.count[i], nodes.shard[i] = 1, float64(le)/float64(nh)
		}
		psCost(c, kind, nodes)
	default:
		c.addPhase(math.Inf(1), 0)
	}
	c.seg = seg
	c.setNodes(c.net.hostOf, nil, 1)
	switch kind {
	case kindAllReduce, kindAllGather:
		localLanesCost(c, h, le)
	default:
		piecesCost(c, h, n)
	}
}

// localLanesCost is a hierarchy's local reduce-scatter or allgather: on a host of k ranks,
// local rank j carries L_j = ⌈(m-j)/k⌉ of the m lanes, sends every other rank's lanes to it
// and receives its own lanes from every other rank. Intra-host messages cross nothing shared.
func localLanesCost(c *coster, h hierarchical, le int) {
	m := h.lanes()
	segs := c.segments(le)
	t, msgs := 0.0, 0.0
	for host, rs := range h.hosts {
		k := len(rs)
		if k < 2 {
			continue
		}
		l := c.net.link(host, host)
		per := segs*l.Alpha + float64(le*c.elem)*l.Beta
		most := float64((m + k - 1) / k) // local rank 0's lanes
		least := float64(m / k)          // local rank k-1's
		t = math.Max(t, math.Max((float64(m)-least)*per, float64(k-1)*most*float64(le*c.elem)*l.Beta))
		msgs += float64((k-1)*m) * segs
	}
	c.addPhase(t, msgs)
}

// piecesCost is a hierarchy's move between the pieces the inter-host reduce-scatter leaves
// (host h's carriers hold 1/H of the buffer) and the ranks' Partition blocks (rank r wants
// 1/p of it): every element once from its carrier's host to its owner's, the buffer spread
// evenly over the hosts.
func piecesCost(c *coster, h hierarchical, n int) {
	net := c.net
	nh, p := len(h.hosts), float64(net.p)
	e := float64(c.elem)
	m := float64(h.lanes())
	gHosts := net.byGroup(func(int) float64 { return 1 })
	gRanks := net.byGroup(func(i int) float64 { return float64(len(h.hosts[i])) })
	ng := len(gHosts)
	hostPart := float64(n) / float64(nh) // what a host's carriers hold
	t, msgs := 0.0, 0.0
	for i, rs := range h.hosts {
		k := float64(len(rs))
		// A rank's pieces: ⌈m/k⌉ lanes' share of the host's part, to owners spread over every
		// host in proportion to their ranks; its block, n/p, from every host's carriers.
		mine := hostPart * math.Ceil(m/k) / m
		owners := math.Ceil(mine*p/float64(n)) + 1
		send, recv, alpha := 0.0, 0.0, 0.0
		for g, qs := range h.hosts {
			if g == i {
				continue
			}
			out, in := net.link(i, g), net.link(g, i)
			send += mine * float64(len(qs)) / p * e * out.Beta
			recv += float64(n) / p / float64(nh) * e * in.Beta
			alpha = math.Max(alpha, out.Alpha)
		}
		t = math.Max(t, math.Max(send+owners*alpha, recv))
		msgs += k * owners
		if net.res != nil {
			out := hostPart * (1 - k/p) * e
			in := float64(n) * k / p * (1 - 1/float64(nh)) * e
			t = math.Max(t, math.Max(out*net.res[2*i], in*net.res[2*i+1]))
		}
	}
	if net.res != nil {
		for g := range ng {
			out := float64(n) * gHosts[g] / float64(nh) * (1 - gRanks[g]/p) * e
			in := float64(n) * gRanks[g] / p * (1 - gHosts[g]/float64(nh)) * e
			t = math.Max(t, math.Max(out*net.res[2*nh+2*g], in*net.res[2*nh+2*g+1]))
		}
	}
	c.addPhase(t, msgs)
}

// psSums is what one node of a host sends and receives in a push and in a pull (seconds, its
// messages one after another), and how many messages the host's nodes send.
type psSums struct {
	pushSend, pushRecv, pushMsgs float64
	pullSend, pullRecv, pullMsgs float64
}

// psHostSums sums every host's exchanges with every other node: a push sends shard[g] to each
// of host g's servers and receives shard[h] from each of g's nodes, a pull the other way
// round. On a network whose links depend only on the hosts' groups (planNet.groupLinks) the
// sums run over groups, with the host's own term put right: O(H·G), not O(H²).
func psHostSums(net *planNet, nodes psNodes, segs []float64, e float64) []psSums {
	nh := len(nodes.count)
	out := make([]psSums, nh)
	total := 0.0
	for _, k := range nodes.count {
		total += float64(k)
	}
	if net.groupLinks == nil {
		for h, k := range nodes.count {
			x := &out[h]
			for g, kg := range nodes.count {
				peers := float64(kg)
				if g == h {
					peers--
				}
				if peers <= 0 {
					continue
				}
				lo, li := net.link(h, g), net.link(g, h)
				x.pushSend += peers * (segs[g]*lo.Alpha + nodes.shard[g]*e*lo.Beta)
				x.pushRecv += peers * nodes.shard[h] * e * li.Beta
				x.pushMsgs += float64(k) * peers * segs[g]
				x.pullSend += peers * (segs[h]*lo.Alpha + nodes.shard[h]*e*lo.Beta)
				x.pullRecv += peers * nodes.shard[g] * e * li.Beta
			}
			x.pullMsgs = float64(k) * (total - 1) * segs[h]
		}
		return out
	}
	kOf := net.byGroup(func(h int) float64 { return float64(nodes.count[h]) })
	segsOf := net.byGroup(func(h int) float64 { return float64(nodes.count[h]) * segs[h] })
	shardOf := net.byGroup(func(h int) float64 { return float64(nodes.count[h]) * nodes.shard[h] })
	allSegs := 0.0
	for _, v := range segsOf {
		allSegs += v
	}
	for h, kh := range nodes.count {
		a, k := net.groupOf[h], float64(kh)
		x := &out[h]
		var sa, sb, ka, kb, rb, rs float64 // sums of α and β over the other nodes
		for b := range kOf {
			lo, li := net.groupLinks[a][b], net.groupLinks[b][a]
			sa += segsOf[b] * lo.Alpha
			sb += shardOf[b] * lo.Beta
			ka += kOf[b] * lo.Alpha
			kb += kOf[b] * lo.Beta
			rb += kOf[b] * li.Beta
			rs += shardOf[b] * li.Beta
		}
		// The sums above counted host h's own nodes as if across the group's links; they
		// are k-1 peers across the host's local link.
		own, loc := net.groupLinks[a][a], net.link(h, h)
		sh := nodes.shard[h]
		sa += -k*segs[h]*own.Alpha + (k-1)*segs[h]*loc.Alpha
		sb += -k*sh*own.Beta + (k-1)*sh*loc.Beta
		ka += -k*own.Alpha + (k-1)*loc.Alpha
		kb += -k*own.Beta + (k-1)*loc.Beta
		rb += -k*own.Beta + (k-1)*loc.Beta
		rs += -k*sh*own.Beta + (k-1)*sh*loc.Beta
		x.pushSend = sa + sb*e
		x.pushRecv = sh * e * rb
		x.pushMsgs = k * (allSegs - segs[h])
		x.pullSend = segs[h]*ka + sh*e*kb
		x.pullRecv = e * rs
		x.pullMsgs = k * (total - 1) * segs[h]
	}
	return out
}
