package collective_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// envContextCalls is the variable that sets how many calls TestContextPerCall makes on each
// data path (300 when unset); HETSYNC_TEST_CONTEXT_CALLS=10000 runs the full count.
const envContextCalls = "HETSYNC_TEST_CONTEXT_CALLS"

// TestContextPerCall makes every call under a context of its own that is cancelled as soon as
// the call returns, the way a program (or a binding to another language) that creates a
// context per call does, on every data path: the in-process transport (point-to-point and
// its arena), libp2p with plain TCP, libp2p with shared memory on one host (the arena), and
// sub-communicators of the last two. In every call one rank comes late, a different one each
// time, so that the others wait in the call while the contexts of their previous calls are
// being cancelled. Every call must succeed with the exact sum.
func TestContextPerCall(t *testing.T) {
	calls := 300
	if s := os.Getenv(envContextCalls); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", envContextCalls, s)
		}
		calls = n
	}
	memJob := func(p, arenaBytes int) func(t *testing.T) []transport.Endpoint {
		return func(t *testing.T) []transport.Endpoint {
			eps := transport.NewMemJobArena(p, arenaBytes)
			t.Cleanup(func() { transport.CloseAll(eps) })
			return eps
		}
	}
	p2pJob := func(p int, dataPath string) func(t *testing.T) []transport.Endpoint {
		return func(t *testing.T) []transport.Endpoint {
			return p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "context per call " + t.Name(), DataPath: dataPath,
				Security: p2p.SecurityNone, Logger: slog.New(slog.DiscardHandler)}, nil)
		}
	}
	tests := []struct {
		name  string
		eps   func(t *testing.T) []transport.Endpoint
		alg   string
		split bool   // run on the halves of the job (by parity of the rank)
		runs  string // the algorithm the calls must run, when it matters
	}{
		{"mem-ring-2", memJob(2, 0), "ring", false, ""},
		{"mem-arena-3", memJob(3, 4<<20), "", false, "arena"},
		{"mem-split-5", memJob(5, 0), "", true, ""},
		{"p2p-tcp-3", p2pJob(3, p2p.DataPathTCP), "", false, ""},
		{"p2p-shm-4", p2pJob(4, p2p.DataPathShm), "", false, "arena"},
		{"p2p-shm-split-4", p2pJob(4, p2p.DataPathShm), "", true, ""},
		{"p2p-tcp-split-5", p2pJob(5, p2p.DataPathTCP), "", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eps := tc.eps(t)
			p := len(eps)
			comms := make([]*collective.Comm, p)
			for r := range p {
				c, err := collective.New(eps[r], collective.Options{Algorithm: tc.alg})
				if err != nil {
					t.Fatal(err)
				}
				comms[r] = c
			}
			if tc.split {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := eachRank(p, func(r int) error {
					half, err := comms[r].Split(ctx, r%2, r)
					comms[r] = half
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			ch, err := comms[0].AllReduceChoice(3, collective.Int64)
			if err != nil {
				t.Fatal(err)
			}
			if tc.runs != "" && ch.Algorithm != tc.runs {
				t.Fatalf("the allreduces run %s, want %s", ch.Algorithm, tc.runs)
			}
			start := time.Now()
			if err := eachRank(p, func(r int) error { return callsWithOwnContexts(comms[r], r, calls) }); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d calls on %d ranks (%s) in %v", calls, p, ch.Algorithm, time.Since(start))
		})
	}
}

// callsWithOwnContexts makes calls allreduces on c, each under a context that is cancelled
// when the call returns; in call i the rank i mod size comes late.
func callsWithOwnContexts(c *collective.Comm, jobRank, calls int) error {
	x := make([]int64, 3)
	for i := range calls {
		if i%c.Size() == c.Rank() {
			// Late by a few tens of microseconds: long enough that the others are waiting
			// in the call, short enough for thousands of calls.
			time.Sleep(time.Duration(10+i%4*20) * time.Microsecond)
		}
		for k := range x {
			x[k] = int64(c.Rank() + k + i)
		}
		ctx, cancel := context.WithCancel(context.Background())
		err := c.AllReduce(ctx, collective.I64(x), collective.Sum)
		cancel()
		if err != nil {
			return fmt.Errorf("job rank %d, call %d: %w", jobRank, i, err)
		}
		p := int64(c.Size())
		for k, v := range x {
			if want := p*int64(k+i) + p*(p-1)/2; v != want {
				return fmt.Errorf("job rank %d, call %d: element %d = %d, want %d", jobRank, i, k, v, want)
			}
		}
	}
	return nil
}

// TestCancelledCallSaysSo: a call that a cancelled context interrupts fails with an error
// that says the context was cancelled (errors.Is context.Canceled), also when it comes right
// after a call whose own context was cancelled as it returned. Each try is a fresh job of 2
// ranks: both make one call, then rank 0 makes a second that rank 1 never comes to, under a
// context that is cancelled at once.
func TestCancelledCallSaysSo(t *testing.T) {
	for _, alg := range []string{"ring", ""} {
		t.Run("alg="+alg, func(t *testing.T) {
			for try := range 100 {
				eps := transport.NewMemJobArena(2, 4<<20)
				comms := make([]*collective.Comm, 2)
				for r := range comms {
					c, err := collective.New(eps[r], collective.Options{Algorithm: alg})
					if err != nil {
						t.Fatal(err)
					}
					comms[r] = c
				}
				if err := eachRank(2, func(r int) error { return callsWithOwnContexts(comms[r], r, 1) }); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go cancel()
				err := comms[0].AllReduce(ctx, collective.F32(make([]float32, 5)), collective.Sum)
				transport.CloseAll(eps)
				if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "context canceled") {
					t.Fatalf("try %d: AllReduce under a cancelled context: %v, want an error saying the context was cancelled", try, err)
				}
			}
		})
	}
}
