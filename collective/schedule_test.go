package collective

import (
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

func testAlgorithms() map[string]algorithm {
	algs := map[string]algorithm{"recursive-doubling": recursiveDoubling{}}
	for _, name := range Algorithms() {
		a, err := lookupAlgorithm(name, Options{})
		if err != nil {
			panic(err)
		}
		algs[name] = a
	}
	algs["ps-2-servers"] = paramServer{servers: 2}
	return algs
}

func TestSchedulesAreConsistent(t *testing.T) {
	kinds := []collKind{kindAllReduce, kindReduceScatter, kindAllGather}
	for name, alg := range testAlgorithms() {
		for p := 1; p <= 16; p++ {
			for _, n := range []int{0, 1, 2, p - 1, p, p + 1, 2*p + 3, 97, 1009} {
				for _, seg := range []int{4, 64, DefaultSegmentBytes} {
					for _, kind := range kinds {
						if (name == "ps-2-servers" && p < 2) || (seg == 4 && n > 40) {
							continue
						}
						if err := checkSchedules(alg, kind, p, max(n, 0), 0, seg); err != nil {
							t.Fatalf("%s %v p=%d n=%d seg=%d: %v", name, kind, p, n, seg, err)
						}
					}
				}
			}
		}
	}
}

func TestSharedSchedulesAreConsistent(t *testing.T) {
	for p := 1; p <= 16; p++ {
		for _, n := range []int{0, 1, p + 1, 1009, 70000} {
			for _, root := range []int{0, p / 2, p - 1} {
				for _, kind := range []collKind{kindBroadcast, kindReduce, kindBarrier} {
					if kind == kindBarrier && (n != 0 || root != 0) {
						continue
					}
					if err := checkSchedules(ring{}, kind, p, n, root, 64<<10); err != nil {
						t.Fatalf("%v p=%d n=%d root=%d: %v", kind, p, n, root, err)
					}
				}
			}
		}
		for _, blk := range []int{0, 1, 3} {
			if err := checkSchedules(ring{}, kindAllToAll, p, blk*p, 0, 64); err != nil {
				t.Fatalf("alltoall p=%d n=%d: %v", p, blk*p, err)
			}
		}
	}
}

// TestCheckerCatchesBrokenSchedules makes sure the checker can fail.
func TestCheckerCatchesBrokenSchedules(t *testing.T) {
	tests := []struct {
		name  string
		alg   algorithm
		wants string
	}{
		{"double reduction", brokenAlg{double: true}, "twice"},
		{"missing receive", brokenAlg{dropRecv: true}, "never received"},
		{"size mismatch", brokenAlg{shortRecv: true}, "got a message"},
		{"deadlock", brokenAlg{deadlock: true}, "deadlock"},
		{"incomplete", brokenAlg{}, "holds contributions"},
	}
	for _, tc := range tests {
		err := checkSchedules(tc.alg, kindAllReduce, 3, 10, 0, 1<<20)
		if err == nil || !contains(err.Error(), tc.wants) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.wants)
		}
	}
}

type brokenAlg struct{ double, dropRecv, shortRecv, deadlock bool }

func (a brokenAlg) allReduce(b *builder) {
	next, prev := mod(b.rank+1, b.p), mod(b.rank-1, b.p)
	switch {
	case a.deadlock:
		b.recv(prev, 0, b.n)
		b.send(next, 0, b.n)
	case a.double: // ring of full vectors: rank r gets r-1's data which already holds r-2's...
		b.send(next, 0, b.n)
		b.recvReduce(prev, 0, b.n)
		b.send(next, 0, b.n)
		b.recvReduce(prev, 0, b.n)
		b.send(next, 0, b.n)
		b.recvReduce(prev, 0, b.n)
	case a.dropRecv:
		b.send(next, 0, b.n)
	case a.shortRecv:
		b.send(next, 0, b.n)
		b.recvReduce(prev, 0, b.n-1)
	default:
		b.send(next, 0, b.n)
		b.recvReduce(prev, 0, b.n)
	}
}
func (a brokenAlg) reduceScatter(b *builder) { a.allReduce(b) }
func (a brokenAlg) allGather(b *builder)     { a.allReduce(b) }

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestPredict(t *testing.T) {
	const alpha, beta = 30e-6, 1 / 1.25e9
	tests := []struct {
		alg       string
		p, bytes  int
		min, max_ float64 // bounds from the closed-form α-β costs
	}{
		// ring: 2(p-1)α + 2(p-1)/p·nβ, plus pipeline fill of a few segments.
		{"ring", 4, 64 << 20, 6*alpha + 1.5*(64<<20)*beta, 1.1 * (6*alpha + 1.5*(64<<20)*beta)},
		// butterfly, p = 8: 2·3α + 2·7/8·nβ.
		{"butterfly", 8, 64 << 20, 6*alpha + 1.75*(64<<20)*beta, 1.1 * (40*alpha + 1.75*(64<<20)*beta)},
		// tiny messages are latency-bound: ring 2(p-1)α, butterfly 2 lg p α.
		{"ring", 8, 8, 14 * alpha, 14.1 * alpha},
		{"butterfly", 8, 8, 6 * alpha, 6.1 * alpha},
		{"ps", 4, 4 << 20, 1.5 * (4 << 20) * beta, 1.3 * (6*alpha + 1.5*(4<<20)*beta)},
		{"binary-blocks", 1, 1 << 20, 0, 0},
		// binary blocks 8+4: ≈ 2nβ (docs/algorithms.md#binary-blocks). Butterfly with folding: MPICH's
		// (1.75+2)·nβ plus the bubbles the replay sees while the core waits for the fold.
		{"binary-blocks", 12, 64 << 20, 1.9 * (64 << 20) * beta, 2.1 * (64 << 20) * beta},
		{"butterfly", 12, 64 << 20, 3.7 * (64 << 20) * beta, 4.5 * (64 << 20) * beta},
	}
	for _, tc := range tests {
		got, err := Predict(tc.alg, tc.p, tc.bytes, alpha, beta)
		if err != nil {
			t.Fatalf("Predict(%s, %d, %d): %v", tc.alg, tc.p, tc.bytes, err)
		}
		if got < tc.min || got > tc.max_ {
			t.Errorf("Predict(%s, p=%d, %d B) = %.3g s, want in [%.3g, %.3g]", tc.alg, tc.p, tc.bytes, got, tc.min, tc.max_)
		}
	}
	if _, err := Predict("nope", 4, 1, alpha, beta); err == nil || !contains(err.Error(), "ring") {
		t.Errorf("Predict of unknown algorithm: err = %v, want one listing the known names", err)
	}
}

func TestAutoChoice(t *testing.T) {
	tests := []struct {
		p, n int
		want string
	}{
		{8, 16, "recursive-doubling"},
		{8, 16 << 20, "butterfly"},
		{9, 16 << 20, "ring"},
	}
	for _, tc := range tests {
		a := newAuto(Options{})
		b := newBuilder(tc.p, 0, tc.n, 4, DefaultSegmentBytes)
		got := fmt.Sprintf("%T", a.pick(kindAllReduce, b))
		wantType := map[string]string{"recursive-doubling": "collective.recursiveDoubling",
			"butterfly": "collective.butterfly", "ring": "collective.ring"}[tc.want]
		if got != wantType {
			t.Errorf("auto p=%d n=%d chose %s, want %s", tc.p, tc.n, got, wantType)
		}
	}
}

// largeSegEndpoint is an endpoint that asks for segments of seg bytes in large calls.
type largeSegEndpoint struct {
	transport.Endpoint
	seg int
}

func (e largeSegEndpoint) LargeSegmentBytes() int { return e.seg }

// TestSegmentFor checks the segment size per call: the endpoint's large segments for large
// calls only, and only when Options.SegmentBytes is 0.
func TestSegmentFor(t *testing.T) {
	const large = 4 << 20
	tests := []struct {
		n, elemSize, seg, large, want int
	}{
		{0, 4, DefaultSegmentBytes, large, DefaultSegmentBytes},
		{1, 4, DefaultSegmentBytes, large, DefaultSegmentBytes},
		{LargeCallBytes/4 - 1, 4, DefaultSegmentBytes, large, DefaultSegmentBytes},
		{LargeCallBytes / 4, 4, DefaultSegmentBytes, large, large},
		{LargeCallBytes/8 + 3, 8, DefaultSegmentBytes, large, large},
		{LargeCallBytes/2 - 1, 1, DefaultSegmentBytes, large, DefaultSegmentBytes},
		{LargeCallBytes, 4, DefaultSegmentBytes, 0, DefaultSegmentBytes},
		{LargeCallBytes, 4, 64 << 10, 0, 64 << 10},
	}
	for _, tc := range tests {
		if got := segmentFor(tc.n, tc.elemSize, tc.seg, tc.large); got != tc.want {
			t.Errorf("segmentFor(%d, %d, %d, %d) = %d, want %d", tc.n, tc.elemSize, tc.seg, tc.large, got, tc.want)
		}
	}
	const n = 8<<20 + 5 // float32, 32 MiB and a few elements: blocks of more than a large segment at p ≤ 8
	for _, p := range []int{1, 2, 3, 4, 5, 8, 9} {
		for _, tc := range []struct {
			set, large int
			lo, hi     int // the largest message's bounds: the ring cuts a block into at least two
		}{
			{0, large, DefaultSegmentBytes, large},
			{0, 0, DefaultSegmentBytes / 2, DefaultSegmentBytes},
			{64 << 10, large, 32 << 10, 64 << 10},
		} {
			eps := transport.NewMemJob(p)
			for r := range eps {
				eps[r] = largeSegEndpoint{eps[r], tc.large}
			}
			j := newJob(t, eps, Options{Algorithm: "ring", SegmentBytes: tc.set})
			for r, c := range j.comms {
				// Reduce-scatter: an allreduce over such an endpoint is chunked (chunk.go).
				s := c.schedule(kindReduceScatter, n, 0, Float32)
				got := s.maxMsg * 4
				if p == 1 {
					if got != 0 {
						t.Fatalf("p=1: largest message %d bytes, want none", got)
					}
					continue
				}
				if got <= tc.lo || got > tc.hi {
					t.Fatalf("p=%d rank %d SegmentBytes=%d, endpoint's large segment %d: largest message %d bytes, want (%d, %d]",
						p, r, tc.set, tc.large, got, tc.lo, tc.hi)
				}
			}
		}
	}
}
