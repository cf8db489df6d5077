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

// TestSyncSwitchMultiRank runs the planned switch and the online policies on several ranks
// and collectives: the job ends on every rank with the same model, and the loss falls.
func TestSyncSwitchMultiRank(t *testing.T) {
	cases := []struct {
		coll, policy string
		size         int
		sleep        []time.Duration
		wantSwitches int // minimum
	}{
		{"ring", "none", 4, nil, 1},
		{"butterfly", "greedy", 3, []time.Duration{0, 0, 3 * time.Millisecond}, 1},
		{"binary-blocks", "elastic", 3, []time.Duration{0, 0, 3 * time.Millisecond}, 2},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%s_p%d", tc.coll, tc.policy, tc.size), func(t *testing.T) {
			cfg := Config{Strategy: "sync-switch", Collective: tc.coll, Batch: 8, LR: 0.1, Momentum: 0.5,
				MaxRounds: 120, Seed: 8, Eval: EvalEvery{Rounds: 30}, StepSleep: tc.sleep,
				SyncSwitch: SyncSwitchConfig{SwitchAt: 0.5, Policy: tc.policy, Window: 3, ElasticRounds: 10}}
			out := runCapturedJob(t, cfg, tc.size, nil)
			last := out.params[0][len(out.params[0])-1]
			for r := 1; r < tc.size; r++ {
				mine := out.params[r][len(out.params[r])-1]
				if paramsHash(mine) != paramsHash(last) {
					t.Fatalf("rank %d ends with a different model from rank 0", r)
				}
			}
			s := out.strats[0].(*syncSwitch)
			if s.switches < tc.wantSwitches {
				t.Errorf("%d switches, want ≥ %d", s.switches, tc.wantSwitches)
			}
			if tc.policy == "greedy" && s.bspDone >= 60 {
				t.Errorf("greedy switched after %d BSP rounds; the straggler should cut BSP short of 60", s.bspDone)
			}
			t.Logf("switches %d, BSP rounds %d, switch time %v, final acc %.3f", s.switches, s.bspDone, s.SwitchTime, out.results[0].FinalAcc)
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85", acc)
			}
		})
	}
}

func TestStragglerDetector(t *testing.T) {
	d := stragglerDetector{Threshold: 1.5, Window: 3}
	even := func(round time.Duration) roundSample {
		return roundSample{Round: round, Compute: []time.Duration{10 * ms, 10 * ms, 11 * ms}}
	}
	slowRank := roundSample{Round: 20 * ms, Compute: []time.Duration{10 * ms, 10 * ms, 16 * ms}}
	rep := func(s roundSample, n int) []roundSample {
		out := make([]roundSample, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cat := func(parts ...[]roundSample) []roundSample {
		var out []roundSample
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name string
		hist []roundSample
		want bool
	}{
		{"empty", nil, false},
		{"steady", rep(even(20*ms), 30), false},
		{"slow compute K rounds", cat(rep(even(20*ms), 5), rep(slowRank, 3)), true},
		{"slow compute K-1 rounds", cat(rep(even(20*ms), 5), rep(slowRank, 2)), false},
		{"slow compute interrupted", cat(rep(slowRank, 2), rep(even(20*ms), 1), rep(slowRank, 2)), false},
		{"compute at exactly θ is not slow", rep(roundSample{Compute: []time.Duration{10 * ms, 10 * ms, 15 * ms}}, 5), false},
		{"slow link: rounds above θ × baseline", cat(rep(even(20*ms), 6), rep(even(31*ms), 3)), true},
		{"rounds at θ × baseline", cat(rep(even(20*ms), 6), rep(even(30*ms), 3)), false},
		{"no baseline yet", cat(rep(even(20*ms), 2), rep(even(40*ms), 3)), false},
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
