package collective

// Chunked allreduce: with the default segment size and without a link matrix (ranks of one
// host, or hosts whose links were not measured), an allreduce of chunkCallBytes or more runs as
// consecutive allreduces of chunks of about streamChunkBytes, the whole algorithm on one chunk
// before the next. Such a call is bound by the memory traffic of its passes over the data (the
// copy into the socket or the shared ring, the copy out of it, the reduction, the allgather),
// and each pass costs more once a call's data no longer stays in the cache between passes: a
// 1 MiB allreduce keeps every rank's buffer and received segments cached, a 4 MiB one does
// not. Chunking keeps each pass over a chunk within reach of the previous one, at the cost of a
// few more messages per call. The chunks' schedules are appended one after the other and the
// executor keeps each list in order, so a rank sends chunk k+1's first messages as soon as it
// has sent chunk k's last, while chunk k's last receives are still arriving.
// docs/results/collective-constants.md has the measurements. A link matrix leaves the call whole: across
// hosts the links, not the cache, bound it, and every chunk would pay the links' latency again.
// Every rank decides from its options alone, which are the same on every rank of a job, so all
// agree on the chunks.

// streamChunkBytes is the chunk size of a chunked allreduce: the call size whose passes over
// the data stay in the cache, measured best over TCP and shared memory.
const streamChunkBytes = 1 << 20

// chunkBytes is the chunk size of a job of p ranks: streamChunkBytes up to maxChunkRanks
// ranks, 0 (no chunks) above. Each chunk is a whole allreduce, so its steps' messages shrink
// with p and every step pays its wake-ups again: in large jobs the chunks cost more than the
// cache saves.
func chunkBytes(p int) int {
	if p > maxChunkRanks {
		return 0
	}
	return streamChunkBytes
}

// maxChunkRanks is the largest job whose allreduces are chunked: where the measurements
// (docs/results/collective-constants.md) put the point at which chunks stop paying.
const maxChunkRanks = 16

// chunkCallBytes is the smallest allreduce that is chunked: two chunks.
const chunkCallBytes = 2 * streamChunkBytes

// chunks is the number of chunks an allreduce of n elements of elemSize bytes is cut into when
// chunk (bytes, > 0) is the chunk size: 1 below chunkCallBytes or when chunk is 0.
func chunks(n, elemSize, chunk int) int {
	bytes := n * elemSize
	if chunk <= 0 || bytes < chunkCallBytes || bytes < 2*chunk {
		return 1
	}
	return (bytes + chunk - 1) / chunk
}

// chunkedAllReduce appends alg's allreduce of b's buffer as k consecutive allreduces of the
// chunks Partition(b.n, k, i), each built as alg builds a call of that size and moved to its
// chunk's offset. Each chunk is a complete allreduce of its range, so the whole is one; tags
// count on across the chunks, so both ends of every transfer still match one for one.
func chunkedAllReduce(alg algorithm, b *builder, k int) {
	for i := 0; i < k; i++ {
		lo, hi := Partition(b.n, k, i)
		sub := newBuilder(b.p, b.rank, hi-lo, b.elemSize, b.seg*b.elemSize)
		alg.allReduce(sub)
		if b.err == nil {
			b.err = sub.err
		}
		for _, st := range sub.steps {
			st.lo += lo
			st.hi += lo
			b.steps = append(b.steps, st)
		}
	}
}

// buildChunkedAllReduce is buildSchedule for an allreduce cut into k chunks (k > 1, p > 1,
// n > 0).
func buildChunkedAllReduce(alg algorithm, p, rank, n, elemSize, segBytes, k int) *schedule {
	b := newBuilder(p, rank, n, elemSize, segBytes)
	chunkedAllReduce(alg, b, k)
	return b.finish()
}
