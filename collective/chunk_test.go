package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

func TestChunks(t *testing.T) {
	const c = streamChunkBytes
	tests := []struct {
		n, elemSize, chunk, want int
	}{
		{0, 4, c, 1},
		{1, 4, c, 1},
		{chunkCallBytes/4 - 1, 4, c, 1},
		{chunkCallBytes / 4, 4, c, 2},
		{chunkCallBytes/4 + 1, 4, c, 3},
		{chunkCallBytes / 8, 8, c, 2},
		{4 << 20 / 4, 4, c, 4},
		{(64<<20)/4 + 7, 4, c, 65},
		{(64 << 20) / 4, 4, 0, 1},
		{(64 << 20) / 4, 4, 48 << 20, 1}, // less than two chunks
	}
	for _, tc := range tests {
		if got := chunks(tc.n, tc.elemSize, tc.chunk); got != tc.want {
			t.Errorf("chunks(%d, %d, %d) = %d, want %d", tc.n, tc.elemSize, tc.chunk, got, tc.want)
		}
	}
}

// TestChunkedSchedulesAreConsistent runs the checker over chunked allreduces: every element
// reduced exactly once on every rank, every send matched, for every algorithm, p = 1..9, odd
// lengths and chunk counts that do not divide them.
func TestChunkedSchedulesAreConsistent(t *testing.T) {
	const elemSize = 4
	for name, alg := range testAlgorithms() {
		for p := 1; p <= 9; p++ {
			if name == "ps-2-servers" && p < 2 {
				continue
			}
			for _, n := range []int{2, p + 1, 2*p + 3, 97, 1009} {
				for _, k := range []int{2, 3, 7} {
					for _, seg := range []int{16, DefaultSegmentBytes} {
						if k > n {
							continue
						}
						scheds := make([]*schedule, p)
						masks := make([][]uint64, p)
						for r := range scheds {
							scheds[r] = buildChunkedAllReduce(alg, p, r, n, elemSize, seg, k)
							masks[r] = make([]uint64, n)
							for e := range masks[r] {
								masks[r][e] = 1 << r
							}
						}
						if _, err := replay(scheds, elemSize, uniformModel(1e-6, 1e-9), masks); err != nil {
							t.Fatalf("%s p=%d n=%d k=%d seg=%d: %v", name, p, n, k, seg, err)
						}
						full := uint64(1)<<p - 1
						for r := range masks {
							for e, m := range masks[r] {
								if m != full {
									t.Fatalf("%s p=%d n=%d k=%d seg=%d: rank %d element %d holds %#x, want %#x", name, p, n, k, seg, r, e, m, full)
								}
							}
						}
					}
				}
			}
		}
	}
}

// largeSegJob is a job of p in-process ranks whose endpoints ask for 4 MiB segments in large
// calls, as plain TCP endpoints do.
func largeSegJob(t *testing.T, p int, opts Options) *job {
	t.Helper()
	eps := transport.NewMemJob(p)
	for r := range eps {
		eps[r] = largeSegEndpoint{eps[r], 4 << 20}
	}
	return newJob(t, eps, opts)
}

// TestChunkBytes: 1 MiB chunks up to 16 ranks, none above.
func TestChunkBytes(t *testing.T) {
	for _, tc := range []struct{ p, want int }{{1, 1 << 20}, {2, 1 << 20}, {4, 1 << 20}, {9, 1 << 20}, {16, 1 << 20}, {17, 0}, {32, 0}, {64, 0}} {
		if got := chunkBytes(tc.p); got != tc.want {
			t.Errorf("chunkBytes(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
}

// TestChunkedAllReduce: an allreduce of two chunks or more, over endpoints that ask for large
// segments and over those that do not, is cut into chunks of at most chunkBytes(p) and gives
// the exact sum on every rank, for p = 1..9 and lengths that are not multiples of a chunk; a
// link matrix or an explicit segment size leaves it whole.
func TestChunkedAllReduce(t *testing.T) {
	for p := 1; p <= 9; p++ {
		n := 2*chunkBytes(p)/4 + 5 // float32: three chunks, of odd lengths
		for _, tc := range []struct {
			alg      string
			largeSeg bool
		}{{"auto", true}, {"ring", true}, {"butterfly", true}, {"binary-blocks", true}, {"auto", false}, {"ring", false}} {
			alg := tc.alg
			j := largeSegJob(t, p, Options{Algorithm: alg})
			if !tc.largeSeg {
				j = newMemJob(t, p, Options{Algorithm: alg})
				alg += " (1 MiB segments)"
			}
			bufs := make([][]float32, p)
			j.mustRun(t, "allreduce", func(c *Comm) error {
				b := make([]float32, n)
				for i := range b {
					b[i] = float32(c.Rank()*1000 + i%1000) // sums stay exact in float32
				}
				bufs[c.Rank()] = b
				return c.AllReduce(context.Background(), F32(b), Sum)
			})
			for r, b := range bufs {
				for i, v := range b {
					want := float32(0)
					for q := range p {
						want += float32(q*1000 + i%1000)
					}
					if v != want {
						t.Fatalf("%s p=%d rank %d element %d = %v, want %v", alg, p, r, i, v, want)
					}
				}
			}
			for r, c := range j.comms {
				s := c.schedule(kindAllReduce, n, 0, Float32)
				if k := c.allReduceChunks(kindAllReduce, n, 4); p > 1 && (s.maxMsg > (n+2)/3 || k != 3) {
					t.Fatalf("%s p=%d rank %d: largest message %d elements, %d chunks; want 3 chunks of at most %d",
						alg, p, r, s.maxMsg, k, (n+2)/3)
				}
			}
		}
	}
	whole := map[string]*job{
		"explicit segment":   largeSegJob(t, 4, Options{SegmentBytes: DefaultSegmentBytes}),
		"link matrix":        largeSegJob(t, 4, Options{Links: topology.Uniform(4, testAlpha, testBetaHost)}),
		"reduce-scatter too": largeSegJob(t, 4, Options{}),
	}
	for what, j := range whole {
		for _, c := range j.comms {
			kind := kindAllReduce
			if what == "reduce-scatter too" {
				kind = kindReduceScatter
			}
			if k := c.allReduceChunks(kind, 2*chunkBytes(4)/4+5, 4); k != 1 {
				t.Errorf("%s: %d chunks, want 1", what, k)
			}
		}
	}
}

// dyingEndpoint fails every Send after the first `after`, as a rank whose link breaks.
type dyingEndpoint struct {
	transport.Endpoint
	after int64
	sent  *atomic.Int64
}

func (e dyingEndpoint) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if e.sent.Add(1) > e.after && len(payload) > 0 {
		return fmt.Errorf("rank %d: link to rank %d broke", e.Rank(), to)
	}
	return e.Endpoint.Send(ctx, to, h, payload)
}

// TestChunkedAllReducePeerDies: a rank whose link breaks after its first chunks fails the
// call, and every other rank's error names it.
func TestChunkedAllReducePeerDies(t *testing.T) {
	const n = 4<<20/4 + 3 // float32: five chunks up to 4 ranks, fewer above
	for _, p := range []int{2, 3, 4, 5, 9} {
		for _, alg := range []string{"auto", "ring"} {
			quitter := p - 1
			eps := transport.NewMemJob(p)
			eps[quitter] = dyingEndpoint{eps[quitter], 3, new(atomic.Int64)}
			for r := range eps {
				eps[r] = largeSegEndpoint{eps[r], 4 << 20}
			}
			j := newJob(t, eps, Options{Algorithm: alg})
			errs := j.run(func(c *Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				return c.AllReduce(ctx, F32(make([]float32, n)), Sum)
			})
			for r, err := range errs {
				if err == nil {
					t.Fatalf("p=%d %s: rank %d succeeded", p, alg, r)
				}
				if r == quitter {
					if !strings.Contains(err.Error(), "broke") {
						t.Errorf("p=%d %s: rank %d: %v, want its broken link", p, alg, r, err)
					}
					continue
				}
				// Its neighbours hear its abort; the others hear theirs, which quotes it.
				var pa *PeerAbortedError
				if !errors.As(err, &pa) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d gave up on call #0", quitter)) {
					t.Errorf("p=%d %s: rank %d: %v, want a *PeerAbortedError naming rank %d", p, alg, r, err, quitter)
				}
			}
		}
	}
}
