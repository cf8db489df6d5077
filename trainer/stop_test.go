package trainer

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestStopRuleDecide(t *testing.T) {
	rule := StopRule{TargetAcc: 0.8, Epochs: 2, MaxTime: time.Minute, MaxRounds: 100, TrainSize: 1000}
	cases := []struct {
		name string
		p    Progress
		stop bool
		why  string
	}{
		{"nothing yet", Progress{BestAcc: -1}, false, ""},
		{"below every bound", Progress{Rounds: 99, GlobalSamples: 1999, Elapsed: 59 * time.Second, BestAcc: 0.79}, false, ""},
		{"target", Progress{BestAcc: 0.8, BestRound: 19}, true, "reached target accuracy 0.8: the snapshot after round 20 scored 0.8"},
		{"target unrounded", Progress{BestAcc: 0.80004, BestRound: 4}, true, "reached target accuracy 0.8: the snapshot after round 5 scored 0.80004"},
		{"rounds", Progress{Rounds: 100, BestAcc: -1}, true, "reached the limit of 100 rounds"},
		{"epochs", Progress{GlobalSamples: 2000, BestAcc: -1}, true, "2 epochs"},
		{"time", Progress{Elapsed: time.Minute, BestAcc: -1}, true, "reached the time limit of 1m0s"},
	}
	for _, tc := range cases {
		stop, why := rule.Decide(tc.p)
		if stop != tc.stop || !strings.Contains(why, tc.why) {
			t.Errorf("%s: Decide = %v %q, want %v %q", tc.name, stop, why, tc.stop, tc.why)
		}
	}
	if stop, _ := (StopRule{}).Decide(Progress{Rounds: 1 << 30, BestAcc: 1}); stop {
		t.Error("a rule without conditions stopped")
	}
	if f := rule.Fraction(Progress{Rounds: 50, GlobalSamples: 500, BestAcc: -1}); f != 0.5 {
		t.Errorf("Fraction = %v, want 0.5 (the nearest bound)", f)
	}
	if f := rule.Fraction(Progress{Rounds: 500, BestAcc: -1}); f != 1 {
		t.Errorf("Fraction = %v, want it capped at 1", f)
	}
}

func TestInjectorExtra(t *testing.T) {
	cases := []struct {
		in      Injector
		compute time.Duration
		want    time.Duration
	}{
		{Injector{Slowdown: 1}, 10 * time.Millisecond, 0},
		{Injector{}, 10 * time.Millisecond, 0},
		{Injector{Slowdown: 3}, 10 * time.Millisecond, 20 * time.Millisecond},
		{Injector{Slowdown: 1.5, StepSleep: time.Millisecond}, 10 * time.Millisecond, 6 * time.Millisecond},
		{Injector{StepSleep: 20 * time.Millisecond}, 0, 20 * time.Millisecond},
		// a fixed base: sleep until the step took f·base, whatever the step computed
		{Injector{Slowdown: 4, Base: 3 * time.Millisecond}, 5 * time.Millisecond, 7 * time.Millisecond},
		{Injector{Slowdown: 4, Base: 3 * time.Millisecond}, 2 * time.Millisecond, 10 * time.Millisecond},
		{Injector{Slowdown: 2, Base: 3 * time.Millisecond}, 8 * time.Millisecond, 0},
		{Injector{Slowdown: 1, Base: 3 * time.Millisecond, StepSleep: time.Millisecond}, 8 * time.Millisecond, time.Millisecond},
		{Injector{Slowdown: 1, Base: 3 * time.Millisecond}, time.Millisecond, 2 * time.Millisecond},
		{Injector{Base: 3 * time.Millisecond}, time.Millisecond, 2 * time.Millisecond},
		{Injector{Slowdown: 2, Base: 3 * time.Millisecond, After: time.Millisecond}, time.Millisecond, 4 * time.Millisecond},
	}
	for _, tc := range cases {
		if got := tc.in.Extra(tc.compute); got != tc.want {
			t.Errorf("%+v.Extra(%v) = %v, want %v", tc.in, tc.compute, got, tc.want)
		}
	}
	cfg := &Config{Slowdown: []float64{1, 4}, StepSleep: []time.Duration{0, 5 * time.Millisecond}, SlowdownBase: time.Millisecond}
	if in := NewInjector(cfg, 1); in.Slowdown != 4 || in.StepSleep != 5*time.Millisecond || in.Base != time.Millisecond {
		t.Errorf("NewInjector(rank 1) = %+v", in)
	}
}

// TestInjectedTimeIsCompute drives LocalStep with a scripted clock: compute is what the
// clock says plus the injected sleep, and the sleep is reported separately.
func TestInjectedTimeIsCompute(t *testing.T) {
	cfg := Config{Batch: 4, Slowdown: []float64{3}, StepSleep: []time.Duration{time.Millisecond}}
	cfg.Defaults()
	eps := newMemEndpoint(t)
	set := newSynthSet(16, 1)
	w, err := newBatchWorker(&cfg, eps, nil, newSynthModel(1), &synthBatches{set: set, batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	w.Now = func() time.Time { now = now.Add(2 * time.Millisecond); return now }
	st, err := w.LocalStep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The scripted clock advances 2ms between the two readings of LocalStep.
	if st.Injected != 5*time.Millisecond || st.Compute != 7*time.Millisecond || st.Samples != 4 {
		t.Fatalf("step stats %+v, want injected 5ms (2·2ms + 1ms), compute 7ms, 4 samples", st)
	}
}
