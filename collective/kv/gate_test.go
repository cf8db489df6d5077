package kv

import (
	"context"
	"runtime"
	"testing"
)

func TestSSPGateBlocked(t *testing.T) {
	cases := []struct {
		s, clock, min uint64
		want          bool
	}{
		{0, 0, 0, false}, {0, 1, 0, true}, {0, 1, 1, false},
		{2, 2, 0, false}, {2, 3, 0, true}, {2, 3, 1, false},
		{40, 41, 0, true}, {40, 5, 9, false}, // a clock below the minimum is never held
	}
	for _, tc := range cases {
		if got := (SSPGate{Staleness: tc.s}).Blocked(tc.clock, tc.min); got != tc.want {
			t.Errorf("s=%d: Blocked(%d, %d) = %v, want %v", tc.s, tc.clock, tc.min, got, tc.want)
		}
	}
}

// waitHeld waits until the server holds worker w's request (or the context ends).
func waitHeld(ctx context.Context, t *testing.T, srv *Service, w int, want bool) {
	t.Helper()
	for {
		srv.local.mu.Lock()
		on := srv.local.held[w].on
		srv.local.mu.Unlock()
		if on == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("worker %d: held=%v never became %v", w, on, want)
		}
		runtime.Gosched()
	}
}

type callResult struct {
	rep Reply
	err error
}

// TestSSPGateHoldsAndReleases checks the three ways out of the gate: the slowest worker
// catching up, a stop vote, and the slowest worker saying bye. A held reply carries the model
// as it is at release time. Readers keep serving while a reply is held (the other workers'
// calls go through).
func TestSSPGateHoldsAndReleases(t *testing.T) {
	ctx := testCtx(t)
	const n, size = 3, 3
	svcs := startJob(t, ctx, size, Config{Len: n, Init: make([]float32, n), Rule: Delta{}.Factory(), SSP: &SSPGate{Staleness: 1}})
	srv := svcs[0]
	one := []float32{1, 1, 1}
	w := make([]float32, n)
	push := func(r int, clock uint64, stop bool) Reply {
		t.Helper()
		rep, err := svcs[r].Push(ctx, one, clock, stop)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// Rank 1 at clock 1 is one ahead of ranks 0 and 2 (clock 0): within the bound.
	if _, err := svcs[1].PushPull(ctx, one, w, 1, false); err != nil {
		t.Fatal(err)
	}
	// At clock 2 it is two ahead: held.
	done := make(chan callResult, 1)
	w1 := make([]float32, n)
	go func() { rep, err := svcs[1].PushPull(ctx, one, w1, 2, false); done <- callResult{rep, err} }()
	waitHeld(ctx, t, srv, 1, true)
	push(0, 1, false) // min is still rank 2's 0
	if rep, err := svcs[0].PushPull(ctx, one, w, 1, false); err != nil || rep.MinClock != 0 {
		t.Fatalf("rank 0: min clock %d err %v, want 0 and no hold (rank 0 is the slowest with rank 2)", rep.MinClock, err)
	}
	select {
	case r := <-done:
		t.Fatalf("rank 1 released while rank 2 is still at clock 0: %+v", r)
	default:
	}
	push(2, 1, false) // min becomes 1: rank 1 (clock 2) is within the bound again
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.MinClock != 1 || w1[0] != 5 {
		t.Fatalf("released reply: min clock %d, w %v; want 1 and every push so far (5)", r.rep.MinClock, w1)
	}

	// A stop vote releases a held worker and tells it to stop.
	go func() { rep, err := svcs[1].Pull(ctx, w1, 5); done <- callResult{rep, err} }()
	waitHeld(ctx, t, srv, 1, true)
	push(0, 2, true)
	if r := <-done; r.err != nil || !r.rep.Stop {
		t.Fatalf("after the stop vote: %+v", r)
	}
	closeJob(t, ctx, svcs)
}

// TestSSPGateByeLeavesTheMinimum checks that a worker that said bye no longer holds the others.
func TestSSPGateByeLeavesTheMinimum(t *testing.T) {
	ctx := testCtx(t)
	const n, size = 2, 3
	svcs := startJob(t, ctx, size, Config{Len: n, Servers: []int{0, 1}, Init: make([]float32, n), Rule: Delta{}.Factory(), SSP: &SSPGate{Staleness: 0}})
	w := make([]float32, n)
	g := make([]float32, n)
	if _, err := svcs[0].Push(ctx, g, 3, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan callResult, 1)
	go func() { rep, err := svcs[1].PushPull(ctx, g, w, 3, false); done <- callResult{rep, err} }()
	waitHeld(ctx, t, svcs[0], 1, true)
	waitHeld(ctx, t, svcs[1], 1, true)
	// Rank 2 (clock 0) leaves; ranks 0 and 1 are both at 3. It hosts no shard: its Close
	// says bye and returns.
	if err := svcs[2].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.rep.MinClock != 3 {
		t.Fatalf("after rank 2's bye: %+v, want min clock 3", r)
	}
	closeJob(t, ctx, svcs[:2])
}
