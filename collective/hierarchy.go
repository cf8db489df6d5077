package collective

// within appends the steps that fn builds for a sub-communicator: member i of the group is
// rank members[i], and the sub-communicator's buffer is elements [lo, hi) of b's. b's rank
// runs its own member's part; a rank outside the group, a group of one member and an empty
// range add nothing (every member skips the same calls, so nothing is left unmatched).
func within(b *builder, members []int, lo, hi int, fn func(sb *builder)) {
	me := -1
	for i, r := range members {
		if r == b.rank {
			me = i
		}
	}
	if me < 0 || len(members) < 2 || hi <= lo {
		return
	}
	sb := &builder{p: len(members), rank: me, n: hi - lo, elemSize: b.elemSize, seg: b.seg}
	fn(sb)
	if b.err == nil {
		b.err = sb.err
	}
	for _, s := range sb.steps {
		s.peer = members[s.peer]
		s.lo += lo
		s.hi += lo
		b.steps = append(b.steps, s)
	}
}

// permuted runs an algorithm with its ranks renumbered: position i of order plays rank i, so
// that the algorithm's neighbours are the order's neighbours. Only the allreduce is renumbered:
// its result is the whole buffer wherever a rank sits, while reduce-scatter and allgather tie
// each rank to its own Partition block and run in rank order.
type permuted struct {
	inner algorithm
	order []int
}

func (a permuted) allReduce(b *builder) {
	within(b, a.order, 0, b.n, a.inner.allReduce)
}
func (a permuted) reduceScatter(b *builder) { a.inner.reduceScatter(b) }
func (a permuted) allGather(b *builder)     { a.inner.allGather(b) }

// hierarchical is the host-aware allreduce (and reduce-scatter, allgather): the buffer is cut
// into m lanes, m the largest number of ranks on one host, and lane c of host h is carried by
// its local rank c mod k_h. Hosts may have different rank counts.
//
//  1. inside each host, a direct reduce-scatter leaves every local rank with its lanes reduced
//     over the host;
//  2. for every lane, the ranks that carry it (one per host, in hostOrder) run the inter-host
//     algorithm on it: all lanes at once, so every rank of a host drives its own slice over
//     the network in parallel instead of one leader carrying the host's whole vector;
//  3. inside each host, every local rank sends its lanes to the others.
//
// Reduce-scatter runs 1 and 2 with the inter-host reduce-scatter and then sends every reduced
// piece to the ranks whose Partition blocks it covers; allgather first sends every Partition
// block to the pieces' carriers, then runs 2 with the inter-host allgather, and 3.
//
// Cost, H hosts of k ranks, inter-host algorithm A: the inter-host links carry what A carries
// for H ranks and n elements, split over k parallel lanes; each host's local links carry
// 2(k-1)/k·n per rank.
type hierarchical struct {
	inter     algorithm
	hosts     [][]int // ranks of each host
	hostOrder []int   // the hosts in the order the inter-host algorithm numbers them
}

func newHierarchical(inter algorithm, l *layout, hostOrder []int) hierarchical {
	return hierarchical{inter: inter, hosts: l.hosts, hostOrder: hostOrder}
}

// lanes is the number of lanes.
func (h hierarchical) lanes() int {
	m := 1
	for _, rs := range h.hosts {
		m = max(m, len(rs))
	}
	return m
}

// local returns b's host's ranks and b's index among them.
func (h hierarchical) local(b *builder) ([]int, int) {
	for _, rs := range h.hosts {
		for j, r := range rs {
			if r == b.rank {
				return rs, j
			}
		}
	}
	return nil, -1
}

// carriers is lane c's carrier on every host, in host order.
func (h hierarchical) carriers(c int) []int {
	out := make([]int, len(h.hostOrder))
	for i, host := range h.hostOrder {
		rs := h.hosts[host]
		out[i] = rs[c%len(rs)]
	}
	return out
}

func (h hierarchical) lane(b *builder, c int) (int, int) { return Partition(b.n, h.lanes(), c) }

// localReduceScatter is step 1: local rank t reduces the lanes c with c mod k = t.
func (h hierarchical) localReduceScatter(b *builder) {
	local, j := h.local(b)
	k, m := len(local), h.lanes()
	for i := 1; i < k; i++ {
		t := (j + i) % k
		for c := t; c < m; c += k {
			lo, hi := h.lane(b, c)
			b.send(local[t], lo, hi)
		}
	}
	for i := 1; i < k; i++ {
		from := local[(j-i+k)%k]
		for c := j; c < m; c += k {
			lo, hi := h.lane(b, c)
			b.recvReduce(from, lo, hi)
		}
	}
}

// localAllGather is step 3: every local rank sends its lanes to the others.
func (h hierarchical) localAllGather(b *builder) {
	local, j := h.local(b)
	k, m := len(local), h.lanes()
	for i := 1; i < k; i++ {
		for c := j; c < m; c += k {
			lo, hi := h.lane(b, c)
			b.send(local[(j+i)%k], lo, hi)
		}
	}
	for i := 1; i < k; i++ {
		t := (j - i + k) % k
		for c := t; c < m; c += k {
			lo, hi := h.lane(b, c)
			b.recv(local[t], lo, hi)
		}
	}
}

// interHost is step 2 with the inter-host collective fn, for every lane b's rank carries.
func (h hierarchical) interHost(b *builder, fn func(a algorithm, sb *builder)) {
	local, j := h.local(b)
	for c := j; c < h.lanes(); c += len(local) {
		lo, hi := h.lane(b, c)
		within(b, h.carriers(c), lo, hi, func(sb *builder) { fn(h.inter, sb) })
	}
}

// piece is lane c's part that its i-th carrier holds reduced after the inter-host
// reduce-scatter (and feeds to the inter-host allgather).
func (h hierarchical) piece(b *builder, c, i int) (int, int) {
	lo, hi := h.lane(b, c)
	a, z := Partition(hi-lo, len(h.hostOrder), i)
	return lo + a, lo + z
}

// scatterPieces sends every piece b's rank carries to the owners of the Partition blocks it
// covers and receives b's block from the carriers of the pieces it covers (reduce-scatter's
// last step); gather reverses the direction (allgather's first step).
func (h hierarchical) scatterPieces(b *builder, gather bool) {
	local, j := h.local(b)
	var mine [][2]int
	for c := j; c < h.lanes(); c += len(local) {
		for i, r := range h.carriers(c) {
			if r == b.rank {
				lo, hi := h.piece(b, c, i)
				mine = append(mine, [2]int{lo, hi})
			}
		}
	}
	blo, bhi := b.block(b.rank)
	var theirs []step
	for c := range h.lanes() {
		for i, r := range h.carriers(c) {
			lo, hi := h.piece(b, c, i)
			theirs = append(theirs, step{peer: r, lo: max(lo, blo), hi: min(hi, bhi)})
		}
	}
	if !gather {
		for _, pc := range mine {
			for i := 1; i <= b.p; i++ {
				q := (b.rank + i) % b.p
				qlo, qhi := b.block(q)
				b.send(q, max(pc[0], qlo), min(pc[1], qhi))
			}
		}
		for _, s := range theirs {
			b.recv(s.peer, s.lo, s.hi)
		}
		return
	}
	for _, s := range theirs {
		b.send(s.peer, s.lo, s.hi)
	}
	for _, pc := range mine {
		for i := 1; i <= b.p; i++ {
			q := (b.rank - i + b.p) % b.p
			qlo, qhi := b.block(q)
			b.recv(q, max(pc[0], qlo), min(pc[1], qhi))
		}
	}
}

func (h hierarchical) allReduce(b *builder) {
	h.localReduceScatter(b)
	h.interHost(b, func(a algorithm, sb *builder) { a.allReduce(sb) })
	h.localAllGather(b)
}

func (h hierarchical) reduceScatter(b *builder) {
	h.localReduceScatter(b)
	h.interHost(b, func(a algorithm, sb *builder) { a.reduceScatter(sb) })
	h.scatterPieces(b, false)
}

func (h hierarchical) allGather(b *builder) {
	h.scatterPieces(b, true)
	h.interHost(b, func(a algorithm, sb *builder) { a.allGather(sb) })
	h.localAllGather(b)
}
