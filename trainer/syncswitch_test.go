package trainer

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective/kv"
)

// TestSyncSwitchCarriesMomentum runs Sync-Switch on one rank, where ASP with the carried
// velocity and lr/N = lr is exactly momentum SGD: the run must equal a plain momentum-SGD
// replay bitwise, and the switch must come after ⌈SwitchAt·MaxRounds⌉ BSP rounds. Zeroing the
// velocity at the switch would break the equality.
func TestSyncSwitchCarriesMomentum(t *testing.T) {
	const rounds = 40
	cfg := Config{Strategy: "sync-switch", Collective: "ring", Batch: 8, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3,
		MaxRounds: rounds, Seed: 2, Eval: EvalEvery{Rounds: 100}, Options: &SyncSwitchConfig{SwitchAt: 0.25}}
	out := runCapturedJob(t, cfg, 1, nil)
	s := out.strats[0].(*syncSwitch)
	if s.switches != 1 || s.bspDone != 10 {
		t.Fatalf("switches=%d after %d BSP rounds, want 1 after ⌈0.25·40⌉ = 10", s.switches, s.bspDone)
	}
	for i, rec := range out.records[0] {
		bsp := !math.IsNaN(globalLoss(rec))
		if bsp != (i < 10) {
			t.Fatalf("round %d: BSP=%v, want BSP exactly for rounds 0..9", i, bsp)
		}
	}
	// Replay: momentum SGD with PyTorch semantics on the same batches.
	replayMomentumSGD(t, cfg, out, SGD{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}, nil,
		"momentum SGD (velocity not carried over the switch?)")
}

// replayMomentumSGD replays a one-rank run of cfg as opt on the same synthetic batches, with
// the learning rate lr(round) when lr is set, and fails at the first round whose parameters
// differ from the run's.
func replayMomentumSGD(t *testing.T, cfg Config, out *capturedJob, opt SGD, lr func(round int) float32, what string) {
	t.Helper()
	train := newSynthSet(1200, 1)
	m := newSynthModel(cfg.Seed)
	b := &synthBatches{set: train.shard(0, 1), batch: cfg.Batch}
	p := append([]float32(nil), m.p...)
	g := make([]float32, len(p))
	for round := range len(out.records[0]) {
		if lr != nil {
			opt.LR = lr(round)
		}
		copy(m.p, p)
		x, y, _ := b.Next()
		if _, _, err := m.ForwardBackward(x, y); err != nil {
			t.Fatal(err)
		}
		copy(g, m.g)
		opt.Step(p, g, 1)
		if paramsHash(p) != paramsHash(out.params[0][round]) {
			t.Fatalf("round %d: the run differs from %s", round, what)
		}
	}
}

// stepClock is a rank's deterministic clock: every reading advances it by a tick, and a
// straggling step advances it further, so that round times, and with them the straggler
// detector's decisions, depend only on the code path and not on the host's load.
type stepClock struct {
	t time.Time
}

func (c *stepClock) Now() time.Time {
	c.t = c.t.Add(100 * time.Microsecond)
	return c.t
}

// stepSlowBatches makes one rank a straggler from its from-th batch on (until its until-th,
// when until > 0): each of those batches costs delay on the rank's clock.
type stepSlowBatches struct {
	inner Batches
	clock *stepClock
	from  int
	until int
	delay time.Duration
	n     int
}

func (b *stepSlowBatches) Next() ([]float32, []uint8, error) {
	b.n++
	if b.n > b.from && (b.until == 0 || b.n <= b.until) {
		b.clock.t = b.clock.t.Add(b.delay)
	}
	return b.inner.Next()
}

// TestSyncSwitchMultiRank runs the planned switch and the online policies on several ranks
// and collectives, with rank 2 turning into a straggler at its 40th step (on deterministic
// per-rank clocks): none switches once as planned, greedy switches for good right after the
// window of straggling rounds, elastic goes to ASP and back repeatedly; every run ends with
// the same model on every rank and learns.
func TestSyncSwitchMultiRank(t *testing.T) {
	cases := []struct {
		coll, policy string
		size         int
	}{
		{"ring", "none", 4},
		{"butterfly", "greedy", 3},
		{"binary-blocks", "elastic", 3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%s_p%d", tc.coll, tc.policy, tc.size), func(t *testing.T) {
			cfg := Config{Strategy: "sync-switch", Collective: tc.coll, Batch: 8, LR: 0.1, Momentum: 0.5,
				MaxRounds: 150, Seed: 8, Eval: EvalEvery{Rounds: 50},
				Options: &SyncSwitchConfig{SwitchAt: 0.9, Policy: tc.policy, Window: 5, ElasticRounds: 10}}
			out := runCapturedJob(t, cfg, tc.size, nil, func(w *Worker) {
				c := &stepClock{t: time.Unix(0, 0)}
				w.Now = c.Now
				if w.Rank == 2 {
					bm := w.Model.(*batchModel)
					bm.data = &stepSlowBatches{inner: bm.data, clock: c, from: 40, delay: 25 * time.Millisecond}
				}
			})
			last := out.params[0][len(out.params[0])-1]
			for r := 1; r < tc.size; r++ {
				mine := out.params[r][len(out.params[r])-1]
				if paramsHash(mine) != paramsHash(last) {
					t.Fatalf("rank %d ends with a different model from rank 0", r)
				}
			}
			s := out.strats[0].(*syncSwitch)
			t.Logf("switches %d, BSP rounds %d, switch time %v, final acc %.3f", s.switches, s.bspDone, s.SwitchTime, out.results[0].FinalAcc)
			switch tc.policy {
			case "none":
				if s.switches != 1 || s.bspDone != 135 {
					t.Errorf("%d switches after %d BSP rounds, want 1 after ⌈0.9·150⌉ = 135", s.switches, s.bspDone)
				}
			case "greedy":
				// Rounds 41.. straggle; the window turns slow when all 5 of its rounds are
				// (41–45), seen one round later: each round carries the previous one's time.
				if s.switches != 1 || s.bspDone != 46 {
					t.Errorf("%d switches after %d BSP rounds, want 1 after 46 (straggler from round 41, window 5)", s.switches, s.bspDone)
				}
			case "elastic":
				if s.switches < 2 || s.bspDone < 40 {
					t.Errorf("%d switches after %d BSP rounds, want ≥ 2 excursions after round 40", s.switches, s.bspDone)
				}
			}
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85", acc)
			}
		})
	}
}

func TestStragglerDetector(t *testing.T) {
	d := stragglerDetector{Threshold: 1.5, Window: 3}
	rep := func(x time.Duration, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = x
		}
		return out
	}
	cat := func(parts ...[]time.Duration) []time.Duration {
		var out []time.Duration
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name string
		hist []time.Duration
		want bool
	}{
		{"empty", nil, false},
		{"steady", rep(20*ms, 30), false},
		{"slow rounds for the whole window", cat(rep(20*ms, 6), rep(31*ms, 3)), true},
		{"slow rounds in most of the window (an evaluation's burst)", cat(rep(20*ms, 6), rep(31*ms, 1), rep(20*ms, 1), rep(31*ms, 1)), false},
		{"slow rounds in the whole window after a burst", cat(rep(20*ms, 6), rep(31*ms, 1), rep(20*ms, 1), rep(31*ms, 3)), true},
		{"one slow round in the window", cat(rep(20*ms, 6), rep(31*ms, 1), rep(20*ms, 2)), false},
		{"at exactly θ × baseline", cat(rep(20*ms, 6), rep(30*ms, 3)), false},
		{"no baseline yet (warm-up)", cat(rep(20*ms, 2), rep(40*ms, 3)), false},
		{"slow from the start is the baseline", rep(80*ms, 20), false},
		{"baseline is the median: one spike in it does not hide a straggler", cat(rep(20*ms, 2), rep(200*ms, 1), rep(20*ms, 3), rep(31*ms, 3)), true},
		{"baseline looks back at most 8×K rounds", cat(rep(10*ms, 30), rep(20*ms, 24), rep(31*ms, 3)), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.Detect(tc.hist); got != tc.want {
				t.Fatalf("Detect = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSyncSwitchConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  SyncSwitchConfig
		want string
	}{
		{SyncSwitchConfig{}, ""},
		{SyncSwitchConfig{SwitchAt: 1.5}, "--switch-at"},
		{SyncSwitchConfig{Policy: "lazy"}, "--straggler-policy"},
		{SyncSwitchConfig{Threshold: 0.9}, "--straggler-threshold"},
		{SyncSwitchConfig{Window: -1}, "--straggler-window"},
		{SyncSwitchConfig{ASPLR: math.NaN()}, "--switch-asp-lr"},
		{SyncSwitchConfig{Momentum: "nesterov"}, "--switch-momentum"},
		{SyncSwitchConfig{Momentum: "ramp", RampRounds: -1}, "--switch-ramp-rounds"},
		{SyncSwitchConfig{Decay: "linear"}, "--switch-lr-decay"},
		{SyncSwitchConfig{Decay: "cosine"}, ""},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate(nil, 4)
		if (err == nil) != (tc.want == "") || (err != nil && !contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err = %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestSyncSwitchByTime switches on rank 0's clock when only --max-time bounds the run: the
// vote rides on the allreduce, so every rank switches after the same round.
func TestSyncSwitchByTime(t *testing.T) {
	cfg := Config{Strategy: "sync-switch", Collective: "ring", Batch: 8, LR: 0.1, MaxTime: 600 * time.Millisecond,
		Seed: 8, Eval: EvalEvery{Rounds: 50}, StepSleep: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond},
		Options: &SyncSwitchConfig{SwitchAt: 0.25}}
	out := runCapturedJob(t, cfg, 3, nil)
	bsp := -1
	for r := range 3 {
		s := out.strats[r].(*syncSwitch)
		if s.switches != 1 {
			t.Fatalf("rank %d switched %d times, want 1", r, s.switches)
		}
		if bsp >= 0 && s.bspDone != bsp {
			t.Fatalf("rank %d switched after %d BSP rounds, rank 0 after %d", r, s.bspDone, bsp)
		}
		bsp = s.bspDone
	}
	for r := 1; r < 3; r++ {
		if paramsHash(out.params[r][len(out.params[r])-1]) != paramsHash(out.params[0][len(out.params[0])-1]) {
			t.Fatalf("rank %d ends with a different model", r)
		}
	}
}

// TestStragglerPolicy drives the three policies with scripted detector input and checks every
// decision: none only switches as planned, greedy switches for good on the first detection,
// elastic goes on excursions, doubles them while the straggler outlasts them, starts over
// after a healthy stretch, skips an excursion not worth its switches and never takes more
// than half of the rounds the run can spare.
func TestStragglerPolicy(t *testing.T) {
	healthy := policyInput{Remaining: 100, Spare: 1000, Slow: 20 * ms, Base: 20 * ms}
	slow := policyInput{Detected: true, Remaining: 100, Spare: 1000, Slow: 80 * ms, Base: 20 * ms, SwitchCost: 5 * ms}
	planned := policyInput{Planned: true, Remaining: 0, Spare: 1000}
	type step struct {
		in     policyInput
		want   policyAction
		before func(p *stragglerPolicy) // e.g. an excursion ends
	}
	stay, sw := policyAction{Kind: actStay}, policyAction{Kind: actSwitch}
	exc := func(n int) policyAction { return policyAction{Kind: actExcursion, Rounds: n} }
	returned := func(p *stragglerPolicy) { p.Returned() }
	rep := func(s step, n int) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name   string
		policy string
		steps  []step
	}{
		{"none ignores stragglers", "none", cat(rep(step{in: healthy, want: stay}, 3), rep(step{in: slow, want: stay}, 3), []step{{in: planned, want: sw}})},
		{"greedy switches on detection", "greedy", []step{{in: healthy, want: stay}, {in: slow, want: sw}}},
		{"greedy: planned switch without stragglers", "greedy", []step{{in: healthy, want: stay}, {in: planned, want: sw}}},
		{"elastic: first excursion", "elastic", []step{{in: healthy, want: stay}, {in: slow, want: exc(10)}}},
		{"elastic: the straggler outlasts excursions, they double", "elastic", cat(
			[]step{{in: slow, want: exc(10)}},
			[]step{{before: returned, in: healthy, want: stay}, {in: slow, want: exc(20)}},
			[]step{{before: returned, in: slow, want: exc(40)}},
		)},
		{"elastic: a straggler long after the last excursion starts over", "elastic", cat(
			[]step{{in: slow, want: exc(10)}, {before: returned, in: healthy, want: stay}},
			rep(step{in: healthy, want: stay}, 15), // 16 > 3×Window BSP rounds since the return
			[]step{{in: slow, want: exc(10)}},
		)},
		{"elastic: not worth two switches", "elastic", []step{
			{in: policyInput{Detected: true, Remaining: 2, Spare: 1000, Slow: 30 * ms, Base: 20 * ms, SwitchCost: 15 * ms}, want: stay},
			{in: policyInput{Detected: true, Remaining: 4, Spare: 1000, Slow: 30 * ms, Base: 20 * ms, SwitchCost: 15 * ms}, want: exc(10)},
		}},
		{"elastic: switch cost unknown before the first switch", "elastic", []step{
			{in: policyInput{Detected: true, Remaining: 1, Spare: 1000, Slow: 30 * ms, Base: 20 * ms}, want: exc(10)},
		}},
		{"elastic: an excursion takes at most half of the spare rounds", "elastic", []step{
			{in: policyInput{Detected: true, Remaining: 50, Spare: 7, Slow: 80 * ms, Base: 20 * ms}, want: exc(3)},
			{before: returned, in: policyInput{Detected: true, Remaining: 50, Spare: 1, Slow: 80 * ms, Base: 20 * ms}, want: stay},
		}},
		{"elastic: bounded by time, no spare limit", "elastic", []step{
			{in: policyInput{Detected: true, Remaining: -1, Spare: -1, Slow: 80 * ms, Base: 20 * ms, SwitchCost: time.Hour}, want: exc(10)},
		}},
		{"elastic: the planned switch comes first", "elastic", []step{{in: policyInput{Planned: true, Detected: true}, want: sw}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newStragglerPolicy(tc.policy, 10, 5)
			for i, s := range tc.steps {
				if s.before != nil {
					s.before(&p)
				}
				if got := p.Decide(s.in); got != s.want {
					t.Fatalf("step %d (%+v): got %+v, want %+v", i, s.in, got, s.want)
				}
			}
		})
	}
}

// TestASPOptimizer checks the ASP phase's settings for every --switch-momentum treatment,
// on 4 ranks with BSP at lr 0.05 and momentum 0.9, and that --switch-asp-lr overrides.
func TestASPOptimizer(t *testing.T) {
	tests := []struct {
		cfg  SyncSwitchConfig
		want aspSettings
	}{
		{SyncSwitchConfig{Momentum: "keep"}, aspSettings{lr: 0.0125, momentum: 0.9, momentumEnd: 0.9, carry: true}},
		{SyncSwitchConfig{Momentum: "scale"}, aspSettings{lr: 0.05, momentum: 0.225, momentumEnd: 0.225, carry: true}},
		{SyncSwitchConfig{Momentum: "ramp", RampRounds: 50}, aspSettings{lr: 0.0125, momentum: 0.225, momentumEnd: 0.9, rampPushes: 200, carry: true}},
		{SyncSwitchConfig{Momentum: "implicit"}, aspSettings{lr: 0.05, momentum: 0.6, momentumEnd: 0.6, carry: true}},
		{SyncSwitchConfig{Momentum: "zero"}, aspSettings{lr: 0.0125, momentum: 0.9, momentumEnd: 0.9}},
		{SyncSwitchConfig{Momentum: "off"}, aspSettings{lr: 0.05}},
		{SyncSwitchConfig{Momentum: "keep", ASPLR: 0.02}, aspSettings{lr: 0.02, momentum: 0.9, momentumEnd: 0.9, carry: true}},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	for _, tc := range tests {
		got := tc.cfg.aspOptimizer(0.05, 0.9, 4)
		if !near(got.lr, tc.want.lr) || !near(got.momentum, tc.want.momentum) || !near(got.momentumEnd, tc.want.momentumEnd) ||
			got.rampPushes != tc.want.rampPushes || got.carry != tc.want.carry {
			t.Errorf("%s: got %+v, want %+v", tc.cfg.Momentum, got, tc.want)
		}
	}
	// Implicit: when asynchrony alone exceeds the momentum (8 ranks, m = 0.5), no explicit
	// momentum, and the learning rate keeps the long-run step: lr/(n(1−m)).
	got := SyncSwitchConfig{Momentum: "implicit"}.aspOptimizer(0.05, 0.5, 8)
	if got.momentum != 0 || !near(got.lr, 0.05/(8*0.5)) {
		t.Errorf("implicit on 8 ranks at m=0.5: got %+v, want momentum 0 and lr %v", got, 0.05/4)
	}
}

// TestMomentumRuleRamp checks the server rule's coefficient ramp against a hand replay: the
// coefficient goes linearly from momentum to momentumEnd over ramp updates and stays there.
func TestMomentumRuleRamp(t *testing.T) {
	r := &momentumRule{lr: 0.1, momentum: 0.2, momentumEnd: 0.6, ramp: 4, v: []float32{1}}
	sh := &kv.Shard{W: []float32{0}}
	w, v := float32(0), float32(1)
	for i, want := range []float32{0.2, 0.3, 0.4, 0.5, 0.6, 0.6} {
		if got := r.coefficient(sh.Version); math.Abs(float64(got-want)) > 1e-6 {
			t.Fatalf("update %d: coefficient %v, want %v", i, got, want)
		}
		if _, err := r.Push(sh, kv.Push{G: []float32{0.5}}); err != nil {
			t.Fatal(err)
		}
		v = want*v + 0.5
		w -= 0.1 * v
		if math.Abs(float64(sh.W[0]-w)) > 1e-6 {
			t.Fatalf("update %d: w = %v, want %v", i, sh.W[0], w)
		}
		sh.Version++
	}
	if _, err := r.Push(sh, kv.Push{G: []float32{1, 2}}); err == nil {
		t.Fatal("a push of the wrong length was accepted")
	}
}

// TestSyncSwitchTransientStraggler makes rank 2 a straggler for its batches 31–45 only (on
// deterministic per-rank clocks), in the middle of a planned 50% BSP phase: none trains all
// of the planned BSP rounds through the straggler; greedy gives up the rest of them at the
// detection; elastic goes to ASP (more than once while the straggler outlasts the first
// excursion) and comes back, and still trains every planned BSP round. Every run ends with
// the same model on every rank.
func TestSyncSwitchTransientStraggler(t *testing.T) {
	const rounds, planned = 150, 75
	for _, policy := range []string{"none", "greedy", "elastic"} {
		t.Run(policy, func(t *testing.T) {
			cfg := Config{Strategy: "sync-switch", Collective: "ring", Batch: 8, LR: 0.1, Momentum: 0.5,
				MaxRounds: rounds, Seed: 8, Eval: EvalEvery{Rounds: 50},
				Options: &SyncSwitchConfig{SwitchAt: 0.5, Policy: policy, Window: 5, ElasticRounds: 5}}
			out := runCapturedJob(t, cfg, 3, nil, func(w *Worker) {
				c := &stepClock{t: time.Unix(0, 0)}
				w.Now = c.Now
				if w.Rank == 2 {
					bm := w.Model.(*batchModel)
					bm.data = &stepSlowBatches{inner: bm.data, clock: c, from: 30, until: 45, delay: 25 * time.Millisecond}
				}
			})
			for r := 1; r < 3; r++ {
				if paramsHash(out.params[r][len(out.params[r])-1]) != paramsHash(out.params[0][len(out.params[0])-1]) {
					t.Fatalf("rank %d ends with a different model from rank 0", r)
				}
			}
			s := out.strats[0].(*syncSwitch)
			t.Logf("switches %d, excursions %d, BSP rounds %d", s.switches, s.excursions, s.bspDone)
			switch policy {
			case "none":
				if s.switches != 1 || s.bspDone != planned {
					t.Errorf("%d switches after %d BSP rounds, want 1 after %d", s.switches, s.bspDone, planned)
				}
			case "greedy":
				if s.switches != 1 || s.excursions != 0 || s.bspDone >= 40 {
					t.Errorf("%d switches, %d excursions, %d BSP rounds: want one switch, right after the straggler appears (round 31)", s.switches, s.excursions, s.bspDone)
				}
			case "elastic":
				if s.bspDone != planned || s.excursions < 1 || s.switches != s.excursions+1 {
					t.Errorf("%d switches, %d excursions, %d BSP rounds: want all %d planned BSP rounds, ≥ 1 excursion and then the planned switch",
						s.switches, s.excursions, s.bspDone, planned)
				}
			}
		})
	}
}

// TestMomentumRuleCosine checks the ASP phase's cosine learning rate: the run's schedule from
// the progress at the phase's start (decayFrom): the base rate × ½(1 + cos(π·0.2)) at its
// first push, half of it at the run's middle, 0 at the end and after, and the update that
// uses it.
func TestMomentumRuleCosine(t *testing.T) {
	r := &momentumRule{lr: 0.4, base: 0.4, decayFrom: 20, decayOver: 100, v: []float32{0}}
	for _, c := range []struct {
		version uint64
		want    float64
	}{{0, 0.4 * 0.5 * (1 + math.Cos(math.Pi*0.2))}, {30, 0.2}, {80, 0}, {500, 0}} {
		if got := r.rate(c.version); math.Abs(float64(got)-c.want) > 1e-6 {
			t.Errorf("version %d: rate %v, want %v", c.version, got, c.want)
		}
	}
	sh := &kv.Shard{W: []float32{1}, Version: 30}
	if _, err := r.Push(sh, kv.Push{G: []float32{0.5}}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(sh.W[0])-(1-0.2*0.5)) > 1e-6 {
		t.Fatalf("w = %v after a push at rate 0.2, want %v", sh.W[0], 1-0.2*0.5)
	}
	if got := (&momentumRule{lr: 0.4}).rate(1e6); got != 0.4 {
		t.Fatalf("without decay the rate is %v, want 0.4", got)
	}
}

// TestSyncSwitchCosineReplay runs Sync-Switch with --switch-lr-decay cosine on one rank, where
// both phases (ASP with scale: m/1, LR) are momentum SGD: the run must equal bitwise the replay
// whose learning rate at round r of 40 is LR·½(1 + cos(πr/40)), in the BSP rounds and the ASP
// pushes alike.
func TestSyncSwitchCosineReplay(t *testing.T) {
	const rounds = 40
	cfg := Config{Strategy: "sync-switch", Collective: "ring", Batch: 8, LR: 0.05, Momentum: 0.9,
		MaxRounds: rounds, Seed: 3, Eval: EvalEvery{Rounds: 100}, Options: &SyncSwitchConfig{SwitchAt: 0.25, Decay: "cosine"}}
	out := runCapturedJob(t, cfg, 1, nil)
	if s := out.strats[0].(*syncSwitch); s.switches != 1 || s.bspDone != 10 {
		t.Fatalf("%d switches after %d BSP rounds, want 1 after 10", s.switches, s.bspDone)
	}
	replayMomentumSGD(t, cfg, out, SGD{Momentum: 0.9}, func(round int) float32 {
		return float32(0.05 * 0.5 * (1 + math.Cos(math.Pi*float64(round)/rounds)))
	}, "momentum SGD on the cosine schedule")
}

// TestStragglerDetectorMedians checks the two medians the elastic policy weighs: of the last
// Window rounds and of the baseline before them, zeros until a baseline exists.
func TestStragglerDetectorMedians(t *testing.T) {
	d := stragglerDetector{Threshold: 1.5, Window: 3}
	if r, b := d.Medians([]time.Duration{ms, ms, ms, ms, ms}); r != 0 || b != 0 {
		t.Fatalf("without a baseline: %v, %v, want zeros", r, b)
	}
	hist := []time.Duration{20 * ms, 10 * ms, 30 * ms, 20 * ms, 90 * ms, 70 * ms, 80 * ms}
	if r, b := d.Medians(hist); r != 80*ms || b != 20*ms {
		t.Fatalf("Medians = %v, %v, want 80ms, 20ms", r, b)
	}
}
