package collective

// ring is the segmented, pipelined ring (Gloo's allreduce_ring_chunked, Open MPI's
// segmented_ring). The buffer is cut into p blocks (Partition). Reduce-scatter: in step k rank r
// sends block r-k-1 to r+1 and reduces block r-k-2 arriving from r-1, so after p-1 steps it owns
// the reduced block r. Allgather: in step k rank r sends block r-k to r+1 and receives block
// r-k-1 from r-1. Every block is cut into segments (at least ringMinSegments per block when the
// block is big enough), and a segment is forwarded as soon as it has been reduced, so the link
// carries one segment while the previous one is being reduced.
//
// Cost: 2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, plus (segments-1)·α of pipeline fill.
type ring struct{}

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

func mod(a, p int) int { return ((a % p) + p) % p }

func (r ring) reduceScatterSteps(b *builder) {
	p, me := b.p, b.rank
	next, prev := mod(me+1, p), mod(me-1, p)
	for k := 0; k < p-1; k++ {
		slo, shi := b.block(mod(me-k-1, p))
		rlo, rhi := b.block(mod(me-k-2, p))
		b.send(next, slo, shi)
		b.recvReduce(prev, rlo, rhi)
	}
}

func (r ring) allGatherSteps(b *builder) {
	p, me := b.p, b.rank
	next, prev := mod(me+1, p), mod(me-1, p)
	for k := 0; k < p-1; k++ {
		slo, shi := b.block(mod(me-k, p))
		rlo, rhi := b.block(mod(me-k-1, p))
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
