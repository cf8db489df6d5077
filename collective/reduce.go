package collective

// buildReduce appends a segmented binomial-tree reduction to root, shared by every algorithm:
// relative rank v receives and reduces the partials of v+1, v+2, v+4, ... (while those bits of v
// are clear), then sends its partial to v minus its lowest set bit. ⌈lg p⌉·(α + nβ + nγ);
// segments flow up the tree as soon as they are reduced. The non-root buffers hold partial
// results afterwards.
func buildReduce(b *builder, root int) {
	p, v := b.p, mod(b.rank-root, b.p)
	real := func(x int) int { return (x + root) % p }
	for mask := 1; mask < p; mask <<= 1 {
		if v&mask != 0 {
			b.send(real(v-mask), 0, b.n)
			return
		}
		if v+mask < p {
			b.recvReduce(real(v+mask), 0, b.n)
		}
	}
}
