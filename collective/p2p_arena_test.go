package collective_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestArenaOverP2P forms 8-rank libp2p jobs on loopback whose ranks share a shared-memory
// arena, runs allreduces of every form through it (checked against the rank-order sum), and
// then closes one rank's endpoint while the others are in a call: every other rank's call
// fails naming it, well before the call's deadline.
func TestArenaOverP2P(t *testing.T) {
	const p = 8
	for _, gone := range []int{0, p - 1} {
		t.Run(fmt.Sprintf("rank %d leaves", gone), func(t *testing.T) {
			eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "arena over p2p " + t.Name(), DataPath: p2p.DataPathShm,
				Security: p2p.SecurityNone, Logger: slog.New(slog.DiscardHandler)}, nil)
			for r, ep := range eps {
				if transport.HostArena(ep) == nil {
					t.Fatalf("rank %d of a one-host shm job has no arena", r)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			comms := make([]*collective.Comm, p)
			for r := range p {
				c, err := collective.New(eps[r], collective.Options{})
				if err != nil {
					t.Fatal(err)
				}
				comms[r] = c
			}
			if ch, _ := comms[0].AllReduceChoice(1000, collective.Float64); ch.Algorithm != "arena" {
				t.Fatalf("auto runs %q, want arena", ch.Algorithm)
			}
			for _, n := range []int{0, 1, p - 1, 1009, 300_007} {
				err := eachRank(p, func(r int) error {
					x := make([]int64, n)
					for i := range x {
						x[i] = int64(r*n + i)
					}
					if err := comms[r].AllReduce(ctx, collective.I64(x), collective.Sum); err != nil {
						return err
					}
					for i, v := range x {
						if want := int64(p*i + n*p*(p-1)/2); v != want {
							return fmt.Errorf("rank %d n=%d: element %d = %d, want %d", r, n, i, v, want)
						}
					}
					return comms[r].Barrier(ctx)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			errs := make([]error, p)
			_ = eachRank(p, func(r int) error {
				if r == gone {
					time.Sleep(50 * time.Millisecond)
					return eps[r].Close()
				}
				errs[r] = comms[r].AllReduce(ctx, collective.F32(make([]float32, 100_000)), collective.Sum)
				return nil
			})
			for r, err := range errs {
				if r != gone && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", gone))) {
					t.Errorf("rank %d: err = %v, want one naming rank %d", r, err, gone)
				}
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("the ranks took %v to notice rank %d leave", d, gone)
			}
		})
	}
}
