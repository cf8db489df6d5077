package collective

// buildBarrier appends a dissemination barrier (Hensgen, Finkel, Manber): in round k rank r
// sends an empty message to r+2^k and waits for one from r-2^k; each send waits for the previous
// round's receive. ⌈lg p⌉ rounds, and no rank leaves before every rank has entered.
func buildBarrier(b *builder) {
	for d := 1; d < b.p; d *= 2 {
		b.fenceSend(mod(b.rank+d, b.p))
		b.emptyRecv(mod(b.rank-d, b.p))
	}
}
