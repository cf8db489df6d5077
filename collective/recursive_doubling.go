package collective

// recursiveDoubling exchanges the whole vector with partner rank^m for m = 1, 2, 4, ... and
// reduces it in: lg p·(α + nβ + nγ). It is the latency-optimal allreduce for small messages and
// is used by auto only (it is not registered: it has no efficient reduce-scatter or allgather).
// For p not a power of two the extra ranks fold into the core first and get the result back
// afterwards (+2α, +2nβ), as in butterfly.
type recursiveDoubling struct{}

func (recursiveDoubling) allReduce(b *builder) {
	foldIntoCore(b, func(core int) {
		for m := 1; m < core; m *= 2 {
			b.send(b.rank^m, 0, b.n)
			b.recvReduce(b.rank^m, 0, b.n)
		}
	})
}

// reduceScatter is the full allreduce (every block ends reduced, the rank's own included); auto
// never chooses it for reduce-scatter.
func (r recursiveDoubling) reduceScatter(b *builder) { r.allReduce(b) }

// allGather delegates to the ring; auto never chooses it for allgather.
func (recursiveDoubling) allGather(b *builder) { ring{}.allGather(b) }
