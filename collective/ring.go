package collective

// ring is the segmented, pipelined ring (Gloo's allreduce_ring_chunked, Open MPI's
// segmented_ring). The buffer is cut into p blocks (Partition). Reduce-scatter: in step k rank r
// sends block r-k-1 to r+1 and reduces block r-k-2 arriving from r-1, so after p-1 steps it owns
// the reduced block r. Allgather: in step k rank r sends block r-k to r+1 and receives block
// r-k-1 from r-1. Every block is cut into segments (at least ringMinSegments per block when the
// block is big enough), and a segment is forwarded as soon as it has been reduced, so the link
// carries one segment while the previous one is being reduced.
//
// The ring visits the ranks in order (rank order when nil): a topology-aware order puts the
// ranks of a host, then of a group of well-connected hosts, next to each other, so that the
// ring crosses each thin link as few times as possible. Position i still ends with rank
// order[i]'s own Partition block, so reduce-scatter and allgather keep their contract.
//
// Cost: 2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, plus (segments-1)·α of pipeline fill.
type ring struct{ order []int }

// ringMinSegments is Gloo's rule: at least two segments per block so that communication
// overlaps reduction; ringMinSegmentBytes keeps small blocks in one message.
const (
	ringMinSegments     = 2
	ringMinSegmentBytes = 64 << 10
)

func (ring) setSegment(b *builder) {
	_, hi := b.block(0) // block 0 is the largest
	perSeg := (hi + ringMinSegments - 1) / ringMinSegments
	floor := ringMinSegmentBytes / b.elemSize
	b.seg = max(min(b.seg, max(perSeg, floor)), 1)
}

// inOrder is the ring visiting the ranks in order (reorderer): every position still ends with
// its rank's own block, so all three collectives keep their contract in any order.
func (r ring) inOrder(order []int) algorithm {
	r.order = order
	return r
}

func mod(a, p int) int { return ((a % p) + p) % p }

// at returns the rank at ring position i (taken mod p) and its block.
func (r ring) at(b *builder, i int) (rank, lo, hi int) {
	i = mod(i, b.p)
	if r.order != nil {
		i = r.order[i]
	}
	lo, hi = b.block(i)
	return i, lo, hi
}

// pos is b's rank's ring position.
func (r ring) pos(b *builder) int {
	for i, q := range r.order {
		if q == b.rank {
			return i
		}
	}
	return b.rank
}

func (r ring) reduceScatterSteps(b *builder) {
	me := r.pos(b)
	next, _, _ := r.at(b, me+1)
	prev, _, _ := r.at(b, me-1)
	for k := 0; k < b.p-1; k++ {
		_, slo, shi := r.at(b, me-k-1)
		_, rlo, rhi := r.at(b, me-k-2)
		b.send(next, slo, shi)
		b.recvReduce(prev, rlo, rhi)
	}
}

func (r ring) allGatherSteps(b *builder) {
	me := r.pos(b)
	next, _, _ := r.at(b, me+1)
	prev, _, _ := r.at(b, me-1)
	for k := 0; k < b.p-1; k++ {
		_, slo, shi := r.at(b, me-k)
		_, rlo, rhi := r.at(b, me-k-1)
		b.send(next, slo, shi)
		b.recv(prev, rlo, rhi)
	}
}

func (r ring) allReduce(b *builder) {
	r.setSegment(b)
	r.reduceScatterSteps(b)
	r.allGatherSteps(b)
}

func (r ring) reduceScatter(b *builder) {
	r.setSegment(b)
	r.reduceScatterSteps(b)
}

func (r ring) allGather(b *builder) {
	r.setSegment(b)
	r.allGatherSteps(b)
}
