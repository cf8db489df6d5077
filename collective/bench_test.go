package collective

import (
	"context"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// BenchmarkAllReduce measures a float32 Sum allreduce on 4 ranks per algorithm, on the
// in-process transport and on TCP loopback, at 1 MiB and 64 MiB. Besides ns/op and MB/s (algbw)
// it reports busbw in GB/s with nccl-tests' convention: algbw·2(p-1)/p.
//
//	go test -run '^$' -bench AllReduce -benchtime 10x ./collective/
func BenchmarkAllReduce(b *testing.B) {
	const p = 4
	for _, tr := range []string{"mem", "tcp"} {
		for _, size := range []int{1 << 20, 64 << 20} {
			for _, alg := range Algorithms() {
				b.Run(fmt.Sprintf("%s/%s/%dMiB", tr, alg, size>>20), func(b *testing.B) {
					var eps []transport.Endpoint
					if tr == "mem" {
						eps = transport.NewMemJob(p)
					} else {
						eps = tcpEndpoints(b, p)
					}
					j := newJob(b, eps, Options{Algorithm: alg})
					bufs := make([][]float32, p)
					for r := range bufs {
						bufs[r] = make([]float32, size/4)
						for i := range bufs[r] {
							bufs[r][i] = float32(r)
						}
					}
					ctx := context.Background()
					// Warm up: build and cache the schedule, grow the pools.
					j.mustRun(b, "warm-up", func(c *Comm) error { return c.AllReduce(ctx, F32(bufs[c.Rank()]), Sum) })
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					j.mustRun(b, alg, func(c *Comm) error {
						for i := 0; i < b.N; i++ {
							if err := c.AllReduce(ctx, F32(bufs[c.Rank()]), Sum); err != nil {
								return err
							}
						}
						return nil
					})
					b.StopTimer()
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(size)/sec*2*(p-1)/p/1e9, "busGB/s")
				})
			}
		}
	}
}
