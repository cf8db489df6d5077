package collective

import (
	"context"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// BenchmarkSmallAllReduce measures the per-call cost that does not depend on the data: a
// 16-element float32 Sum allreduce on 4 ranks with the ring, on the in-process transport and on
// TCP loopback, with a context that never ends and with a cancellable one (the Comm's time
// limit applies to both) and with one that has a deadline; and on 1 rank, where the call moves nothing and only its own bookkeeping
// (turn, time limit, schedule lookup) is left.
//
//	go test -run '^$' -bench SmallAllReduce ./collective/
func BenchmarkSmallAllReduce(b *testing.B) {
	const p, n = 4, 16
	withDeadline, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cancellable, stop := context.WithCancel(context.Background())
	defer stop()
	for _, tr := range []string{"mem", "tcp", "1-rank"} {
		for _, limit := range []struct {
			name string
			ctx  context.Context
		}{{"background", context.Background()}, {"deadline", withDeadline}, {"cancellable", cancellable}} {
			b.Run(fmt.Sprintf("%s/%s", tr, limit.name), func(b *testing.B) {
				var eps []transport.Endpoint
				switch tr {
				case "mem":
					eps = transport.NewMemJob(p)
				case "tcp":
					eps = tcpEndpoints(b, p)
				default:
					eps = transport.NewMemJob(1)
				}
				j := newJob(b, eps, Options{Algorithm: "ring"})
				j.benchAllReduce(b, limit.ctx, n)
			})
		}
	}
}

// benchAllReduce times b.N float32 Sum allreduces of n elements on every rank of j, after one
// untimed call.
func (j *job) benchAllReduce(b *testing.B, ctx context.Context, n int) {
	bufs := make([][]float32, len(j.comms))
	for r := range bufs {
		bufs[r] = make([]float32, n)
	}
	call := func(c *Comm) error { return c.AllReduce(ctx, F32(bufs[c.Rank()]), Sum) }
	j.mustRun(b, "warm-up", call)
	b.ReportAllocs()
	b.ResetTimer()
	j.mustRun(b, "allreduce", func(c *Comm) error {
		for i := 0; i < b.N; i++ {
			if err := call(c); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
}
