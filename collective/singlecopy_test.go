package collective

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestCollectivesSingleCopy runs every collective of every algorithm, with odd lengths and a
// few MiB, over the "cma" data path of real libp2p jobs, with every write of every size moved
// as a single copy (the receiver reading the sender's buffer with process_vm_readv), and checks
// the results against the reference, and that every pair really took the single-copy path.
func TestCollectivesSingleCopy(t *testing.T) {
	for _, p := range []int{2, 3, 5} {
		for _, alg := range Algorithms() {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "single copy", Security: p2p.SecurityNone,
					DataPath: p2p.DataPathCMA, SingleCopyMin: 1, Logger: slog.New(slog.DiscardHandler)}, nil)
				for r, ep := range eps {
					for q, path := range ep.(interface{ DataPaths() []string }).DataPaths() {
						if q != r && path != p2p.DataPathCMA {
							t.Fatalf("rank %d to rank %d: data path %q, want %q", r, q, path, p2p.DataPathCMA)
						}
					}
				}
				// Small segments, so that the few MiB make many messages in flight.
				j := newJob(t, eps, Options{Algorithm: alg, SegmentBytes: 4096})
				exercise(t, j, alg)
				const n = 3<<20/4 + 7 // a little over 3 MiB of float32
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				bufs := make([]Buffer, p)
				j.mustRun(t, alg+" 3 MiB", func(c *Comm) error {
					bufs[c.Rank()] = input(Float32, c.Rank(), n)
					return c.AllReduce(ctx, bufs[c.Rank()], Sum)
				})
				want := reference(Float32, Sum, p, n)
				for r := range bufs {
					if err := compare(bufs[r], want, 0, n); err != nil {
						t.Fatalf("%s p=%d 3 MiB rank %d: %v", alg, p, r, err)
					}
				}
			})
		}
	}
}
