package trainer

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestSyncSwitchCarriesMomentum runs Sync-Switch on one rank, where ASP with the carried
// velocity and lr/N = lr is exactly momentum SGD: the run must equal a plain momentum-SGD
// replay bitwise, and the switch must come after ⌈SwitchAt·MaxRounds⌉ BSP rounds. Zeroing the
// velocity at the switch would break the equality.
func TestSyncSwitchCarriesMomentum(t *testing.T) {
	const rounds = 40
	cfg := Config{Strategy: "sync-switch", Collective: "ring", Batch: 8, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3,
		MaxRounds: rounds, Seed: 2, Eval: EvalEvery{Rounds: 100}, SyncSwitch: SyncSwitchConfig{SwitchAt: 0.25}}
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
	train := newSynthSet(1200, 1)
	m := newSynthModel(cfg.Seed)
	b := &synthBatches{set: train.shard(0, 1), batch: cfg.Batch}
	opt := SGD{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}
	p := append([]float32(nil), m.p...)
	g := make([]float32, len(p))
	recs := out.records[0]
	for round := range len(recs) {
		copy(m.p, p)
		x, y, _ := b.Next()
		if _, _, err := m.ForwardBackward(x, y); err != nil {
			t.Fatal(err)
		}
		copy(g, m.g)
		opt.Step(p, g, 1)
		if paramsHash(p) != paramsHash(out.params[0][round]) {
			t.Fatalf("round %d: the run differs from momentum SGD (velocity not carried over the switch?)", round)
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

// stepSlowBatches makes one rank a straggler from its from-th batch on: each later batch
// costs delay on the rank's clock.
type stepSlowBatches struct {
	inner Batches
	clock *stepClock
	from  int
	delay time.Duration
	n     int
}

func (b *stepSlowBatches) Next() ([]float32, []uint8, error) {
	b.n++
	if b.n > b.from {
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
				SyncSwitch: SyncSwitchConfig{SwitchAt: 0.9, Policy: tc.policy, Window: 5, ElasticRounds: 10}}
			out := runCapturedJob(t, cfg, tc.size, nil, func(w *Worker) {
				c := &stepClock{t: time.Unix(0, 0)}
				w.Now = c.Now
				if w.Rank == 2 {
					w.Data = &stepSlowBatches{inner: w.Data, clock: c, from: 40, delay: 25 * time.Millisecond}
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
				// Rounds 41.. straggle; the window's median turns slow with 3 of its 5 rounds
				// (41–43), seen one round later: each round carries the previous one's time.
				if s.switches != 1 || s.bspDone != 44 {
					t.Errorf("%d switches after %d BSP rounds, want 1 after 44 (straggler from round 41, window 5)", s.switches, s.bspDone)
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
		{"slow rounds in most of the window", cat(rep(20*ms, 6), rep(31*ms, 1), rep(20*ms, 1), rep(31*ms, 1)), true},
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
		{SyncSwitchConfig{Momentum: "ramp"}, "--switch-momentum"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
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
		SyncSwitch: SyncSwitchConfig{SwitchAt: 0.25}}
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
