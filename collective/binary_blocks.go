package collective

// binaryBlocks is Rabenseifner's binary-blocks algorithm for any p, with Gloo's grouping
// (allreduce_halving_doubling.h): p is written in binary and every set bit 2^k becomes a block
// of 2^k consecutive ranks, the largest block on the lowest ranks (13 = 8 + 4 + 1: ranks 0-7,
// 8-11, 12). The vector is cut into b0 "units" (Partition(n, b0, u), b0 the largest block); a
// rank at index j of a block of size b owns units [j·b0/b, (j+1)·b0/b), so the ownership of every
// block nests inside the next larger one.
//
// Allreduce:
//  1. every block runs recursive halving over the whole vector (all blocks at once);
//  2. chain up: each rank receives the partials of its units from the next smaller block and
//     reduces them in, then sends its units to the ranks of the next larger block that own them;
//  3. the largest block now holds the result; chain down: each rank sends its units back to the
//     next smaller block (the ranks it received from), after receiving them from the larger one;
//  4. every block runs recursive doubling.
//
// Reduce-scatter stops after step 2 and sends each rank its Partition block from the largest
// block; allgather first sends every Partition block to the largest block, then runs 3 and 4.
//
// Cost (an estimate, docs/algorithms.md#binary-blocks): ≈ 2⌊lg p⌋α + 2·(#blocks-1) chain hops; ≈ 2nβ for two blocks
// (8+4, 8+1), more with three or more blocks since the chain serialises. For p a power of two it
// is the butterfly.
type binaryBlocks struct{}

type bbLayout struct {
	sizes, offsets []int
	b0             int
	blk, j         int // this rank's block and index in it
}

func newBBLayout(p, rank int) bbLayout {
	var l bbLayout
	off := 0
	for bit := pow2Floor(p); bit >= 1; bit /= 2 {
		if p&bit != 0 {
			l.sizes = append(l.sizes, bit)
			l.offsets = append(l.offsets, off)
			off += bit
		}
	}
	l.b0 = l.sizes[0]
	for i := range l.sizes {
		if rank >= l.offsets[i] && rank < l.offsets[i]+l.sizes[i] {
			l.blk, l.j = i, rank-l.offsets[i]
		}
	}
	return l
}

// units returns the element range of units [u0, u1).
func (l bbLayout) units(b *builder, u0, u1 int) (int, int) {
	lo, _ := Partition(b.n, l.b0, u0)
	_, hi := Partition(b.n, l.b0, u1-1)
	return lo, hi
}

// owned returns the element range that index j of block i owns.
func (l bbLayout) owned(b *builder, i, j int) (int, int) {
	per := l.b0 / l.sizes[i]
	return l.units(b, j*per, (j+1)*per)
}

func (l bbLayout) group(b *builder, i int) group {
	per := l.b0 / l.sizes[i]
	return group{offset: l.offsets[i], size: l.sizes[i], ranges: func(x, y int) (lo1, hi1, lo2, hi2 int) {
		lo1, hi1 = l.units(b, x*per, y*per)
		return
	}}
}

// chainUp appends steps 1 and 2.
func (l bbLayout) chainUp(b *builder) {
	i, j := l.blk, l.j
	halving(b, l.group(b, i), j)
	lo, hi := l.owned(b, i, j)
	if i+1 < len(l.sizes) { // receive from the smaller block
		ratio := l.sizes[i] / l.sizes[i+1]
		b.recvReduce(l.offsets[i+1]+j/ratio, lo, hi)
	}
	if i > 0 { // send to the larger block
		ratio := l.sizes[i-1] / l.sizes[i]
		for k := j * ratio; k < (j+1)*ratio; k++ {
			klo, khi := l.owned(b, i-1, k)
			b.send(l.offsets[i-1]+k, klo, khi)
		}
	}
}

// chainDown appends steps 3 and 4.
func (l bbLayout) chainDown(b *builder) {
	i, j := l.blk, l.j
	if i > 0 {
		ratio := l.sizes[i-1] / l.sizes[i]
		for k := j * ratio; k < (j+1)*ratio; k++ {
			klo, khi := l.owned(b, i-1, k)
			b.recv(l.offsets[i-1]+k, klo, khi)
		}
	}
	if i+1 < len(l.sizes) {
		lo, hi := l.owned(b, i, j)
		ratio := l.sizes[i] / l.sizes[i+1]
		b.send(l.offsets[i+1]+j/ratio, lo, hi)
	}
	doubling(b, l.group(b, i), j)
}

func (binaryBlocks) allReduce(b *builder) {
	l := newBBLayout(b.p, b.rank)
	l.chainUp(b)
	l.chainDown(b)
}

func (binaryBlocks) reduceScatter(b *builder) {
	l := newBBLayout(b.p, b.rank)
	l.chainUp(b)
	// Redistribute from the largest block's ownership to Partition blocks.
	if l.blk == 0 {
		lo, hi := l.owned(b, 0, l.j)
		for r := 0; r < b.p; r++ {
			plo, phi := b.block(r)
			b.send(r, max(lo, plo), min(hi, phi))
		}
	}
	plo, phi := b.block(b.rank)
	for k := 0; k < l.b0; k++ {
		lo, hi := l.owned(b, 0, k)
		b.recv(k, max(lo, plo), min(hi, phi))
	}
}

func (binaryBlocks) allGather(b *builder) {
	l := newBBLayout(b.p, b.rank)
	plo, phi := b.block(b.rank)
	for k := 0; k < l.b0; k++ {
		lo, hi := l.owned(b, 0, k)
		b.send(k, max(lo, plo), min(hi, phi))
	}
	if l.blk == 0 {
		lo, hi := l.owned(b, 0, l.j)
		for r := 0; r < b.p; r++ {
			rlo, rhi := b.block(r)
			b.recv(r, max(lo, rlo), min(hi, rhi))
		}
	}
	l.chainDown(b)
}
