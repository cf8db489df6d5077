package kv

import (
	"context"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// BenchmarkPushPull measures one worker's push-pull round trip of a whole model against the
// shards of an in-process job (the other ranks only serve).
func BenchmarkPushPull(b *testing.B) {
	for _, tc := range []struct{ size, servers, n int }{{2, 1, 235146}, {4, 4, 235146}} {
		b.Run(fmt.Sprintf("p%d_servers%d_n%d", tc.size, tc.servers, tc.n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			servers := make([]int, tc.servers)
			for i := range servers {
				servers[i] = i
			}
			cfg := Config{Len: tc.n, Servers: servers, Init: make([]float32, tc.n), Rule: SGD{LR: 1e-6}.Factory()}
			eps := transport.NewMemJob(tc.size)
			svcs := make([]*Service, tc.size)
			for r, ep := range eps {
				s, err := Start(ctx, ep, cfg)
				if err != nil {
					b.Fatal(err)
				}
				svcs[r] = s
			}
			g := make([]float32, tc.n)
			w := make([]float32, tc.n)
			b.SetBytes(int64(8 * tc.n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := svcs[tc.size-1].PushPull(ctx, g, w, uint64(i), false); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			done := make(chan error, tc.size)
			for _, s := range svcs {
				go func() { done <- s.Close(ctx) }()
			}
			for range svcs {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
