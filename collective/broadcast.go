package collective

// broadcastChainBytes is where Broadcast switches from the binomial tree to the chain.
const broadcastChainBytes = 256 << 10

// buildBroadcast appends a segmented broadcast from root, shared by every algorithm.
//
// Up to broadcastChainBytes: binomial tree over ranks relative to root, ⌈lg p⌉·(α + nβ); each
// segment is forwarded to the children as soon as it arrives. Above: a pipelined chain
// root → root+1 → ... with at least 8 segments, ≈ (p-2+S)·(α + nβ/S) → nβ for large n.
func buildBroadcast(b *builder, root int) {
	p, v := b.p, mod(b.rank-root, b.p)
	real := func(x int) int { return (x + root) % p }
	if b.n*b.elemSize > broadcastChainBytes {
		b.seg = max(min(b.seg, (b.n+7)/8), 1)
		if v > 0 {
			b.recv(real(v-1), 0, b.n)
		}
		if v+1 < p {
			b.send(real(v+1), 0, b.n)
		}
		return
	}
	mask := 1
	for mask < p {
		if v&mask != 0 {
			b.recv(real(v-mask), 0, b.n)
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < p {
			b.send(real(v+mask), 0, b.n)
		}
	}
}
