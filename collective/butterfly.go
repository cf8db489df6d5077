package collective

// butterfly is recursive halving reduce-scatter followed by recursive doubling allgather
// (Rabenseifner; MPICH's reduce_scatter_allgather). With p' = 2^⌊lg p⌋ and rem = p - p':
//
//  1. fold (allreduce, reduce-scatter): "extra" rank p'+j sends its whole vector to core rank j,
//     which reduces it in. Allgather instead sends the extra rank's block.
//  2. halving among the p' core ranks, largest distance first: a core rank owning the core-rank
//     range [a, a+2m) keeps the half containing itself and exchanges the other half with
//     rank^m. The data of a core-rank range [x, y) is blocks [x, y) plus, for the ranks below
//     rem, the extra ranks' blocks [x+p', min(y, rem)+p'), so the halving works directly on the
//     final Partition blocks and core rank j ends with blocks j and p'+j (natural order, no
//     bit-reversal permutation, unlike Gloo's nearest-first pairing).
//  3. doubling replays the halving in reverse without reduction.
//  4. unfold: core rank j sends the result (whole vector, or block p'+j) to extra rank p'+j.
//
// Cost (p power of two): 2 lg p·α + 2(p-1)/p·nβ + (p-1)/p·nγ. Otherwise MPICH's bound:
// (2⌊lg p⌋+2)α + (2(p-1)/p + 2)·nβ — the fold and unfold move the whole vector.
type butterfly struct{}

func pow2Floor(p int) int {
	q := 1
	for q*2 <= p {
		q *= 2
	}
	return q
}

// group is a power-of-two set of ranks offset..offset+size-1 that runs recursive halving and
// doubling together; ranges maps the member indices [x, y) to their (at most two) element ranges.
type group struct {
	offset, size int
	ranges       func(x, y int) (lo1, hi1, lo2, hi2 int)
}

// coreGroup is butterfly's group: the core ranks, each owning its block and its extra rank's.
func coreGroup(b *builder, core int) group {
	rem := b.p - core
	return group{offset: 0, size: core, ranges: func(x, y int) (lo1, hi1, lo2, hi2 int) {
		lo1, _ = b.block(x)
		_, hi1 = b.block(y - 1)
		if x < rem {
			lo2, _ = b.block(x + core)
			_, hi2 = b.block(min(y, rem) - 1 + core)
		}
		return
	}}
}

// halving appends member j's recursive-halving reduce-scatter, largest distance first; member
// j ends with the reduced data of ranges(j, j+1).
func halving(b *builder, g group, j int) {
	a := 0
	for m := g.size / 2; m >= 1; m /= 2 {
		partner := g.offset + (j ^ m)
		lo, hi := a, a+2*m
		mid := lo + m
		keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
		if j >= mid {
			keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
		}
		g1, g2, g3, g4 := g.ranges(giveLo, giveHi)
		k1, k2, k3, k4 := g.ranges(keepLo, keepHi)
		b.send(partner, g1, g2)
		b.send(partner, g3, g4)
		b.recvReduce(partner, k1, k2)
		b.recvReduce(partner, k3, k4)
		a = keepLo
	}
}

// doubling appends member j's recursive-doubling allgather: the reverse of halving.
func doubling(b *builder, g group, j int) {
	for m := 1; m < g.size; m *= 2 {
		partner := g.offset + (j ^ m)
		lo := j &^ (2*m - 1)
		mid := lo + m
		mineLo, mineHi, theirLo, theirHi := lo, mid, mid, lo+2*m
		if j >= mid {
			mineLo, mineHi, theirLo, theirHi = mid, lo+2*m, lo, mid
		}
		m1, m2, m3, m4 := g.ranges(mineLo, mineHi)
		t1, t2, t3, t4 := g.ranges(theirLo, theirHi)
		b.send(partner, m1, m2)
		b.send(partner, m3, m4)
		b.recv(partner, t1, t2)
		b.recv(partner, t3, t4)
	}
}

func (butterfly) allReduce(b *builder) {
	foldIntoCore(b, func(core int) {
		halving(b, coreGroup(b, core), b.rank)
		doubling(b, coreGroup(b, core), b.rank)
	})
}

// foldIntoCore runs allreduce among the largest power-of-two core of ranks (MPICH's scheme for
// other p): an extra rank core+i first hands its whole vector to rank i, which reduces it in,
// runs the core algorithm with the other core ranks, and sends the result back. +2α, +2nβ.
func foldIntoCore(b *builder, run func(core int)) {
	core := pow2Floor(b.p)
	me := b.rank
	if me >= core {
		b.send(me-core, 0, b.n)
		b.recv(me-core, 0, b.n)
		return
	}
	if me+core < b.p {
		b.recvReduce(me+core, 0, b.n)
	}
	run(core)
	if me+core < b.p {
		b.send(me+core, 0, b.n)
	}
}

func (butterfly) reduceScatter(b *builder) {
	core := pow2Floor(b.p)
	me := b.rank
	if me >= core {
		b.send(me-core, 0, b.n)
		lo, hi := b.block(me)
		b.recv(me-core, lo, hi)
		return
	}
	if me+core < b.p {
		b.recvReduce(me+core, 0, b.n)
	}
	halving(b, coreGroup(b, core), me)
	if me+core < b.p {
		lo, hi := b.block(me + core)
		b.send(me+core, lo, hi)
	}
}

func (butterfly) allGather(b *builder) {
	core := pow2Floor(b.p)
	me := b.rank
	if me >= core {
		lo, hi := b.block(me)
		b.send(me-core, lo, hi)
		b.recv(me-core, 0, b.n)
		return
	}
	if me+core < b.p {
		lo, hi := b.block(me + core)
		b.recv(me+core, lo, hi)
	}
	doubling(b, coreGroup(b, core), me)
	if me+core < b.p {
		b.send(me+core, 0, b.n)
	}
}
