package kv

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestWBSPTriggers drives workers in a fixed order with the slow rank pinned. In buffered
// mode the model changes only on the slow rank's push (by the mean of every delta since the
// last trigger); in immediate mode every delta lands at once. In both, a worker receives the
// model exactly on its first push after a trigger, and the slow worker on its own push.
func TestWBSPTriggers(t *testing.T) {
	for _, immediate := range []bool{false, true} {
		for _, servers := range [][]int{nil, {0, 1, 2}} {
			t.Run(fmt.Sprintf("immediate%v_servers%v", immediate, servers), func(t *testing.T) {
				ctx := testCtx(t)
				const n, size, slow = 11, 3, 1
				w0 := initVec(n)
				svcs := startJob(t, ctx, size, Config{Len: n, Servers: servers, Init: w0,
					Rule: WBSP{Immediate: immediate, PinSlow: true, SlowRank: slow}.Factory()})
				model := append([]float32(nil), w0...) // the server's w
				acc := make([]float32, n)
				published := append([]float32(nil), w0...)
				version := uint64(0)
				pulled := make([]uint64, size)
				got := make([]float32, n)
				// Fast ranks 0 and 2 push several times per slow push.
				order := []int{0, 2, 0, 2, 0, 1, 2, 0, 2, 0, 2, 1, 1, 0, 0}
				clock := make([]uint64, size)
				for k, r := range order {
					clock[r]++
					d := grad(n, r, k)
					for i := range d {
						if immediate {
							model[i] += d[i] / size
						} else {
							acc[i] += d[i] / size
						}
					}
					if r == slow {
						for i := range model {
							model[i] += acc[i]
							acc[i] = 0
						}
						copy(published, model)
						version++
					}
					for i := range got {
						got[i] = -99
					}
					rep, err := svcs[r].PushPullIfNewer(ctx, d, got, clock[r], false)
					if err != nil {
						t.Fatal(err)
					}
					wantFresh := version > pulled[r]
					if (rep.Fresh > 0) != wantFresh || (wantFresh && rep.Fresh != len(svcs[r].servers)) {
						t.Fatalf("push %d (rank %d): %d fresh shards, want model=%v", k, r, rep.Fresh, wantFresh)
					}
					if rep.Version != version {
						t.Fatalf("push %d (rank %d): version %d, want %d", k, r, rep.Version, version)
					}
					if !wantFresh {
						if got[0] != -99 {
							t.Fatalf("push %d (rank %d): model written without a new version", k, r)
						}
						continue
					}
					pulled[r] = version
					want := published
					if immediate {
						want = model // immediate: the pull sees every delta so far
					}
					for i := range want {
						if math.Abs(float64(got[i]-want[i])) > 1e-5 {
							t.Fatalf("push %d (rank %d): w[%d] = %v, want %v", k, r, i, got[i], want[i])
						}
					}
				}
				closeJob(t, ctx, svcs)
			})
		}
	}
}

// TestWBSPDynamicTrigger feeds the rule a scripted clock: rank 2 steps every 10 ms, the
// others every 1 ms. After the warm-up (every push triggers until each worker has an
// interval), only rank 2's pushes publish.
func TestWBSPDynamicTrigger(t *testing.T) {
	now := time.Unix(0, 0)
	f := WBSP{Now: func() time.Time { return now }}.Factory()
	sh := &Shard{W: make([]float32, 2), Workers: 3}
	rule, err := f(sh)
	if err != nil {
		t.Fatal(err)
	}
	clock := make([]uint64, 3)
	next := []time.Duration{0, 0, 0}
	period := []time.Duration{time.Millisecond, time.Millisecond, 10 * time.Millisecond}
	warm := true
	for ev := 0; ev < 200; ev++ {
		r := 0 // the worker whose next push comes first (lowest rank on ties)
		for i := range next {
			if next[i] < next[r] {
				r = i
			}
		}
		now = time.Unix(0, 0).Add(next[r])
		next[r] += period[r]
		clock[r]++
		pub, err := rule.Push(sh, Push{Worker: r, Clock: clock[r], G: []float32{1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		if clock[2] >= 2 {
			warm = false
		}
		if !warm && pub != (r == 2) {
			t.Fatalf("push %d by rank %d at %v: published=%v, want only rank 2's pushes to publish", ev, r, now.Sub(time.Unix(0, 0)), pub)
		}
	}
}

func TestPickSlowest(t *testing.T) {
	cases := []struct {
		per     []float64
		current int
		margin  float64
		want    int
	}{
		{nil, -1, 0.1, -1},
		{[]float64{1, 0, 3}, -1, 0.1, -1}, // rank 1 unknown
		{[]float64{1, 2, 3}, -1, 0.1, 2},
		{[]float64{3, 2, 3}, -1, 0.1, 0},  // ties: the lowest rank
		{[]float64{1, 3, 3.2}, 1, 0.1, 1}, // within the margin: keep the current
		{[]float64{1, 3, 3.4}, 1, 0.1, 2}, // beyond it: switch
		{[]float64{5, 3, 1}, 2, 0, 0},     // the current is no longer the slowest
		{[]float64{2, 2}, 1, 0, 1},        // equal with margin 0: keep the current
	}
	for _, tc := range cases {
		if got := PickSlowest(tc.per, tc.current, tc.margin); got != tc.want {
			t.Errorf("PickSlowest(%v, %d, %v) = %d, want %d", tc.per, tc.current, tc.margin, got, tc.want)
		}
	}
}

func TestSlowDetectorUsesClockAdvance(t *testing.T) {
	d := NewSlowDetector(2, 1, 0.1) // alpha 1: the newest interval only
	t0 := time.Unix(0, 0)
	d.Observe(0, 1, t0)
	d.Observe(1, 1, t0)
	// Rank 0 pushes once for 4 steps in 8 ms (2 ms/step); rank 1 one step in 3 ms.
	d.Observe(0, 5, t0.Add(8*time.Millisecond))
	if got := d.Observe(1, 2, t0.Add(3*time.Millisecond)); got != 1 {
		t.Fatalf("slowest = %d, want 1 (3 ms/step against 2 ms/step)", got)
	}
}
