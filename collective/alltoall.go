package collective

// buildAllToAll appends a pairwise exchange: in round k = 1..p-1 rank r sends its block r+k of
// the send buffer to rank r+k and receives block r-k of the receive buffer from rank r-k. The
// own block is copied locally before the schedule runs. (p-1)·(α + n/p·β).
func buildAllToAll(b *builder) {
	p, me := b.p, b.rank
	blk := b.n / p
	for k := 1; k < p; k++ {
		to, from := mod(me+k, p), mod(me-k, p)
		b.sendAux(to, to*blk, (to+1)*blk)
		b.recv(from, from*blk, (from+1)*blk)
	}
}
