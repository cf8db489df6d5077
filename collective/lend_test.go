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

// TestCollectivesLentPayloads runs every collective of every algorithm over the shared-memory
// path of real libp2p jobs with StreamOptions.Lend, where the segments a rank reduces while
// its receiver waits are lent from the pipes' rings
// and reduced where they lie: odd lengths of every type (so lent payloads start unaligned), a
// few MiB in small segments (many lends held at once), and segments larger than half a ring,
// which the endpoint copies out instead. Results are checked against the reference.
func TestCollectivesLentPayloads(t *testing.T) {
	cases := []struct {
		ps      []int
		segment int
		n       int
		full    bool // run every collective at odd lengths too
	}{
		{[]int{2, 5}, 4096, 3<<20/4 + 7, true},
		{[]int{4}, 3 << 19, 5<<20/4 + 3, false}, // 1.5 MiB segments: more than half the 2 MiB ring
	}
	for _, tc := range cases {
		for _, p := range tc.ps {
			for _, alg := range Algorithms() {
				t.Run(fmt.Sprintf("%s/p=%d/segment=%d", alg, p, tc.segment), func(t *testing.T) {
					eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "lent payloads", Security: p2p.SecurityNone,
						DataPath: p2p.DataPathShm, Stream: transport.StreamOptions{Lend: true},
						Logger: slog.New(slog.DiscardHandler)}, nil)
					j := newJob(t, eps, Options{Algorithm: alg, SegmentBytes: tc.segment})
					if tc.full {
						exercise(t, j, alg)
					}
					ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
					defer cancel()
					bufs := make([]Buffer, p)
					j.mustRun(t, alg+" allreduce", func(c *Comm) error {
						bufs[c.Rank()] = input(Float32, c.Rank(), tc.n)
						return c.AllReduce(ctx, bufs[c.Rank()], Sum)
					})
					want := reference(Float32, Sum, p, tc.n)
					for r := range bufs {
						if err := compare(bufs[r], want, 0, tc.n); err != nil {
							t.Fatalf("%s p=%d rank %d: %v", alg, p, r, err)
						}
					}
				})
			}
		}
	}
}
