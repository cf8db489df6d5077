package collective

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestCollectivesLentPayloads runs the allreduce of every algorithm over the shared-memory path
// of real libp2p jobs with lending as configured by default, where the segments of
// transport.DefaultLendMin bytes or more that a rank reduces while its receiver waits are lent
// from the pipes' rings and reduced where they lie: odd lengths (so lent payloads start
// unaligned and end mid-element-group), segments at the smallest lent size, and segments larger
// than half a ring, which the endpoint copies instead. Results are checked against the
// reference.
func TestCollectivesLentPayloads(t *testing.T) {
	cases := []struct {
		p       int
		algs    []string
		segment int
		ns      []int
	}{
		{3, Algorithms(), transport.DefaultLendMin, []int{3<<20/4 + 7, 1<<20/4 - 1, 5}},
		{4, []string{"ring"}, 3 << 19, []int{5<<20/4 + 3}}, // 1.5 MiB segments: more than half the 2 MiB ring
	}
	for _, tc := range cases {
		for _, alg := range tc.algs {
			t.Run(fmt.Sprintf("%s/p=%d/segment=%d", alg, tc.p, tc.segment), func(t *testing.T) {
				eps := p2ptest.JoinLoopback(t, tc.p, p2p.Config{Secret: "lent payloads", Security: p2p.SecurityNone,
					DataPath: p2p.DataPathShm, Logger: slog.New(slog.DiscardHandler)}, nil)
				j := newJob(t, eps, Options{Algorithm: alg, SegmentBytes: tc.segment})
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				for _, n := range tc.ns {
					bufs := make([]Buffer, tc.p)
					j.mustRun(t, fmt.Sprintf("%s allreduce of %d", alg, n), func(c *Comm) error {
						bufs[c.Rank()] = input(Float32, c.Rank(), n)
						return c.AllReduce(ctx, bufs[c.Rank()], Sum)
					})
					want := reference(Float32, Sum, tc.p, n)
					for r := range bufs {
						if err := compare(bufs[r], want, 0, n); err != nil {
							t.Fatalf("%s p=%d n=%d rank %d: %v", alg, tc.p, n, r, err)
						}
					}
				}
			})
		}
	}
}
