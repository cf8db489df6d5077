package collective

import (
	"context"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// TestExecutorPaths runs the same allreduces through both executors: on the calling goroutine
// alone (messages up to inlineMaxBytes) and with a sender goroutine beside the receiver (larger
// segments), on the in-process transport (receives copied into the Comm's temp buffer) and on
// TCP (reduced segments borrowed from the endpoint).
func TestExecutorPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-MiB buffers; run without -short")
	}
	const p, n = 2, 5<<20/4 + 5 // a little over 5 MiB of float32: every message above 1 MiB at p = 2
	for _, tr := range []string{"mem", "tcp"} {
		for _, seg := range []int{64 << 10, 4 << 20} {
			for _, alg := range []string{"ring", "butterfly", "binary-blocks", "ps"} {
				t.Run(fmt.Sprintf("%s/seg=%d/%s", tr, seg, alg), func(t *testing.T) {
					var eps []transport.Endpoint
					if tr == "mem" {
						eps = transport.NewMemJob(p)
					} else {
						eps = tcpEndpoints(t, p)
					}
					j := newJob(t, eps, Options{Algorithm: alg, SegmentBytes: seg})
					s := j.comms[0].schedule(kindAllReduce, n, 0, Float32)
					if inline := s.maxMsg*4 <= inlineMaxBytes; inline != (seg <= inlineMaxBytes) {
						t.Fatalf("largest message %d bytes: runs inline = %v, want %v", s.maxMsg*4, inline, seg <= inlineMaxBytes)
					}
					ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
					defer cancel()
					bufs := make([]Buffer, p)
					want := reference(Float32, Sum, p, n)
					for round := 0; round < 2; round++ {
						j.mustRun(t, alg, func(c *Comm) error {
							bufs[c.Rank()] = input(Float32, c.Rank(), n)
							return c.AllReduce(ctx, bufs[c.Rank()], Sum)
						})
						for r := range bufs {
							if err := compare(bufs[r], want, 0, n); err != nil {
								t.Fatalf("round %d rank %d: %v", round, r, err)
							}
						}
					}
				})
			}
		}
	}
}
