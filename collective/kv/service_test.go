package kv

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// startJob starts the service on every rank of an in-process job.
func startJob(t *testing.T, ctx context.Context, size int, cfg Config) []*Service {
	t.Helper()
	return startOn(t, ctx, transport.NewMemJob(size), cfg)
}

// startOn starts the service on every endpoint of a job.
func startOn(t *testing.T, ctx context.Context, eps []transport.Endpoint, cfg Config) []*Service {
	t.Helper()
	size := len(eps)
	svcs := make([]*Service, size)
	for r, ep := range eps {
		s, err := Start(ctx, ep, cfg)
		if err != nil {
			t.Fatalf("rank %d: Start: %v", r, err)
		}
		svcs[r] = s
	}
	return svcs
}

// closeJob closes every rank concurrently (a server returns only when all workers are done).
func closeJob(t *testing.T, ctx context.Context, svcs []*Service) {
	t.Helper()
	errs := make([]error, len(svcs))
	var wg sync.WaitGroup
	for r, s := range svcs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = s.Close(ctx) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func initVec(n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	return w
}

// grad is the deterministic gradient worker r pushes at step k.
func grad(n, r, k int) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = float32((i+1)*(r+2)%11)/8 - float32(k%3)/4
	}
	return g
}

// TestSGDMatchesReference drives the workers in a fixed order so the server's result must
// equal, bit for bit, the same updates computed here.
func TestSGDMatchesReference(t *testing.T) {
	cases := []struct {
		size    int
		servers []int
		n       int
	}{
		{1, nil, 0}, {1, nil, 1}, {2, nil, 13}, {3, []int{0, 1, 2}, 2},
		{4, []int{1, 3}, 31}, {5, []int{4, 0, 2}, 97}, {8, []int{0, 1, 2, 3, 4, 5, 6, 7}, 7},
	}
	const lr, scale = 0.05, 2
	for _, tc := range cases {
		t.Run(fmt.Sprintf("p%d_servers%v_n%d", tc.size, tc.servers, tc.n), func(t *testing.T) {
			ctx := testCtx(t)
			w0 := initVec(tc.n)
			svcs := startJob(t, ctx, tc.size, Config{Len: tc.n, Servers: tc.servers, Init: w0, Rule: SGD{LR: lr, Scale: scale}.Factory()})
			ref := append([]float32(nil), w0...)
			got := make([]float32, tc.n)
			for k := 0; k < 3; k++ {
				for r, s := range svcs {
					g := grad(tc.n, r, k)
					for i := range ref {
						ref[i] -= float32(lr*scale) * g[i]
					}
					var rep Reply
					var err error
					if r%2 == 0 {
						rep, err = s.PushPull(ctx, g, got, uint64(k+1), false)
					} else {
						if rep, err = s.Push(ctx, g, uint64(k+1), false); err == nil {
							rep, err = s.Pull(ctx, got, uint64(k+1))
						}
					}
					if err != nil {
						t.Fatalf("rank %d step %d: %v", r, k, err)
					}
					if want := uint64(k*tc.size + r + 1); tc.n > 0 && rep.Version != want {
						t.Errorf("rank %d step %d: version %d, want %d", r, k, rep.Version, want)
					}
					for i := range ref {
						if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
							t.Fatalf("rank %d step %d: w[%d] = %v, reference %v", r, k, i, got[i], ref[i])
						}
					}
				}
			}
			closeJob(t, ctx, svcs)
		})
	}
}

// TestStalenessAndClocks checks that staleness counts the updates published between a
// worker's pull and its push, and that replies carry the minimum clock.
func TestStalenessAndClocks(t *testing.T) {
	ctx := testCtx(t)
	const n = 5
	svcs := startJob(t, ctx, 3, Config{Len: n, Servers: []int{0, 2}, Init: initVec(n), Rule: SGD{LR: 0.1}.Factory()})
	w := make([]float32, n)
	g := grad(n, 0, 0)
	if _, err := svcs[1].Pull(ctx, w, 1); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3; k++ {
		if _, err := svcs[2].PushPull(ctx, g, w, uint64(10+k), false); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := svcs[1].PushPull(ctx, g, w, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Staleness != 3 {
		t.Errorf("staleness = %d, want 3 (rank 2 pushed three times since rank 1 pulled)", rep.Staleness)
	}
	if rep.MinClock != 0 {
		t.Errorf("min clock = %d, want 0 (rank 0 never reported)", rep.MinClock)
	}
	if _, err := svcs[0].Pull(ctx, w, 7); err != nil {
		t.Fatal(err)
	}
	rep, err = svcs[2].PushPull(ctx, g, w, 13, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Staleness != 1 || rep.MinClock != 4 || rep.Version != 5 {
		t.Errorf("got %+v, want staleness 1 (rank 1's push), min clock 4, version 5", rep)
	}
	closeJob(t, ctx, svcs)
}

// TestStopVote checks that a stop vote reaches every worker through its next reply.
func TestStopVote(t *testing.T) {
	ctx := testCtx(t)
	const n, size = 9, 4
	svcs := startJob(t, ctx, size, Config{Len: n, Servers: []int{0, 1, 2, 3}, Init: initVec(n), Rule: SGD{LR: 0.1}.Factory()})
	w := make([]float32, n)
	g := make([]float32, n)
	for r, s := range svcs {
		rep, err := s.PushPull(ctx, g, w, 1, false)
		if err != nil || rep.Stop {
			t.Fatalf("rank %d before the vote: stop=%v err=%v", r, rep.Stop, err)
		}
	}
	if _, err := svcs[0].Push(ctx, g, 2, true); err != nil {
		t.Fatal(err)
	}
	for r, s := range svcs {
		rep, err := s.Pull(ctx, w, 2)
		if err != nil || !rep.Stop {
			t.Fatalf("rank %d after the vote: stop=%v err=%v", r, rep.Stop, err)
		}
	}
	closeJob(t, ctx, svcs)
}

// accumulate is a WBSP-like rule: pushes accumulate and publish only on rank 1's push.
type accumulate struct{ acc []float32 }

func (a *accumulate) Push(s *Shard, p Push) (bool, error) {
	for i, v := range p.G {
		a.acc[i] += v
	}
	if p.Worker != 1 {
		return false, nil
	}
	for i := range s.W {
		s.W[i] += a.acc[i]
		a.acc[i] = 0
	}
	return true, nil
}
func (a *accumulate) Pulled(*Shard, int) {}

// TestCustomRulePublishes checks that versions advance only when the rule publishes.
func TestCustomRulePublishes(t *testing.T) {
	ctx := testCtx(t)
	const n = 4
	factory := func(s *Shard) (Rule, error) { return &accumulate{acc: make([]float32, len(s.W))}, nil }
	svcs := startJob(t, ctx, 3, Config{Len: n, Servers: []int{2, 0}, Init: make([]float32, n), Rule: factory})
	one := []float32{1, 1, 1, 1}
	w := make([]float32, n)
	for _, r := range []int{0, 2, 0} {
		rep, err := svcs[r].PushPull(ctx, one, w, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Version != 0 || w[0] != 0 {
			t.Fatalf("rank %d: version %d, w %v: published before the trigger", r, rep.Version, w)
		}
	}
	rep, err := svcs[1].PushPull(ctx, one, w, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != 1 || w[0] != 4 || w[3] != 4 {
		t.Fatalf("after the trigger: version %d, w %v, want 1 and all 4", rep.Version, w)
	}
	closeJob(t, ctx, svcs)
}

// TestConcurrentWorkers runs all workers at once; with SGD the final model is the initial
// one minus lr times the sum of all pushes, in any order (up to rounding).
// TestConcurrentWorkers runs every worker at once against two servers, over the in-memory
// transport and over libp2p, and checks the servers' model against the sum of every push.
func TestConcurrentWorkers(t *testing.T) {
	const size = 5
	for _, tc := range []struct {
		name string
		job  func(t *testing.T) []transport.Endpoint
	}{
		{"mem", func(*testing.T) []transport.Endpoint { return transport.NewMemJob(size) }},
		{"p2p", func(t *testing.T) []transport.Endpoint {
			return p2ptest.JoinLoopback(t, size, p2p.Config{Secret: "kv " + t.Name(), Security: p2p.SecurityNone,
				Logger: slog.New(slog.DiscardHandler)}, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentWorkers(t, tc.job(t)) })
	}
}

func testConcurrentWorkers(t *testing.T, eps []transport.Endpoint) {
	ctx := testCtx(t)
	const n, steps, lr = 37, 40, 0.01
	size := len(eps)
	w0 := initVec(n)
	svcs := startOn(t, ctx, eps, Config{Len: n, Servers: []int{0, 3}, Init: w0, Rule: SGD{LR: lr}.Factory()})
	ref := make([]float64, n)
	for i := range ref {
		ref[i] = float64(w0[i])
	}
	for r := 0; r < size; r++ {
		for k := 0; k < steps; k++ {
			for i, v := range grad(n, r, k) {
				ref[i] -= lr * float64(v)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := make([]float32, n)
			for k := 0; k < steps && errs[r] == nil; k++ {
				_, errs[r] = s.PushPull(ctx, grad(n, r, k), w, uint64(k+1), false)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	w := make([]float32, n)
	rep, err := svcs[1].Pull(ctx, w, steps)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != uint64(size*steps) || rep.MinClock != steps {
		t.Errorf("version %d min clock %d, want %d and %d", rep.Version, rep.MinClock, size*steps, steps)
	}
	for i := range w {
		if math.Abs(float64(w[i])-ref[i]) > 1e-4 {
			t.Fatalf("w[%d] = %v, want %v", i, w[i], ref[i])
		}
	}
	closeJob(t, ctx, svcs)
}

func TestConfigErrors(t *testing.T) {
	sgd := SGD{LR: 0.1}.Factory()
	cases := []struct {
		name string
		rank int
		cfg  Config
		want string
	}{
		{"negative length", 1, Config{Len: -1}, "model length"},
		{"server out of range", 1, Config{Len: 3, Servers: []int{4}}, "out of range"},
		{"duplicate server", 1, Config{Len: 3, Servers: []int{1, 1}}, "listed twice"},
		{"server without init", 0, Config{Len: 3, Rule: sgd}, "Init has 0 values"},
		{"server without rule", 0, Config{Len: 3, Init: make([]float32, 3)}, "no update rule"},
		{"bad learning rate", 0, Config{Len: 3, Init: make([]float32, 3), Rule: SGD{}.Factory()}, "learning rate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eps := transport.NewMemJob(3)
			_, err := Start(context.Background(), eps[tc.rank], tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestWrongLengthIsAnError(t *testing.T) {
	ctx := testCtx(t)
	svcs := startJob(t, ctx, 2, Config{Len: 4, Init: make([]float32, 4), Rule: SGD{LR: 0.1}.Factory()})
	if _, err := svcs[1].Push(ctx, make([]float32, 3), 1, false); err == nil || !strings.Contains(err.Error(), "model has 4") {
		t.Fatalf("short push: err = %v", err)
	}
	if _, err := svcs[1].Pull(ctx, make([]float32, 5), 1); err == nil || !strings.Contains(err.Error(), "model has 4") {
		t.Fatalf("long pull: err = %v", err)
	}
	closeJob(t, ctx, svcs)
}

// TestOwnShardServedInPlace checks that a rank's requests to the shard it hosts send no
// message (only the other shards' requests go over the transport) and give the same answers
// as a remote worker's, and that behind an SSP gate its pulling requests still go through its
// reader, where the gate may hold them.
func TestOwnShardServedInPlace(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(fmt.Sprintf("gate%v", gated), func(t *testing.T) {
			ctx := testCtx(t)
			const n, size = 9, 2
			cfg := Config{Len: n, Servers: []int{0, 1}, Init: initVec(n), Rule: Delta{}.Factory()}
			if gated {
				cfg.SSP = &SSPGate{Staleness: 5}
			}
			svcs := startJob(t, ctx, size, cfg)
			want := initVec(n)
			got := make([]float32, n)
			for k := 0; k < 3; k++ {
				for r, s := range svcs {
					g := grad(n, r, k)
					for i := range want {
						want[i] += g[i]
					}
					sent := s.ep.Stats().MsgsSent
					rep, err := s.PushPull(ctx, g, got, uint64(k+1), false)
					if err != nil {
						t.Fatalf("rank %d step %d: %v", r, k, err)
					}
					// One request to the remote shard; with the gate also the request to the
					// own shard and the own reader's reply to it.
					wantMsgs := uint64(1)
					if gated {
						wantMsgs = 3
					}
					if d := s.ep.Stats().MsgsSent - sent; d != wantMsgs {
						t.Errorf("rank %d step %d: push-pull sent %d messages, want %d", r, k, d, wantMsgs)
					}
					if rep.Fresh != 2 || !s.Fresh(0) || !s.Fresh(1) {
						t.Errorf("rank %d step %d: %d fresh shards (%v, %v), want both", r, k, rep.Fresh, s.Fresh(0), s.Fresh(1))
					}
					if wantV := uint64(k*size + r + 1); rep.Version != wantV || rep.ClockSum == 0 {
						t.Errorf("rank %d step %d: version %d clock sum %d, want version %d", r, k, rep.Version, rep.ClockSum, wantV)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("rank %d step %d: w[%d] = %v, want %v", r, k, i, got[i], want[i])
						}
					}
				}
			}
			// A push to both shards: rank 0's own half goes in place.
			sent := svcs[0].ep.Stats().MsgsSent
			if _, err := svcs[0].Push(ctx, make([]float32, n), 4, false); err != nil {
				t.Fatal(err)
			}
			if d := svcs[0].ep.Stats().MsgsSent - sent; d != 1 {
				t.Errorf("push sent %d messages, want 1 (to rank 1's shard)", d)
			}
			closeJob(t, ctx, svcs)
		})
	}
}
