package trainer

import (
	"slices"
	"strings"
	"testing"
)

// The outer optimizer keeps every rank's model identical under each strategy it applies to,
// on 1 to 5 ranks, and changes the model (it is applied).
func TestOuterKeepsReplicasIdentical(t *testing.T) {
	for _, strategy := range []string{"esync", "wbsp", "wbsp-opt"} {
		for size := 1; size <= 5; size++ {
			cfg := Config{Strategy: strategy, Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 6, Seed: 3}
			plain := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
			cfg.Outer = OuterNesterov
			outer := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
			for _, out := range []ckptOutcome{plain, outer} {
				if out.err != nil {
					t.Fatalf("%s on %d ranks: %v", strategy, size, out.err)
				}
			}
			for r := 1; r < size; r++ {
				if !slices.Equal(outer.params[r], outer.params[0]) {
					t.Fatalf("%s --outer nesterov on %d ranks: rank %d's model differs from rank 0's", strategy, size, r)
				}
			}
			if slices.Equal(outer.params[0], plain.params[0]) {
				t.Fatalf("%s on %d ranks: --outer nesterov changed nothing", strategy, size)
			}
		}
	}
}

// Outer SGD at rate 1 without momentum is the strategy's own average, bit for bit: ESync's
// on one rank (on several, its rounds take as many local steps as their timing allows, so two
// runs differ whatever the update) and local SGD's (--wbsp-period) on three.
func TestOuterSGDAtRateOneIsThePlainAverage(t *testing.T) {
	for _, j := range []struct {
		cfg  Config
		size int
	}{
		{Config{Strategy: "esync", Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 6, Seed: 3}, 1},
		{Config{Strategy: "wbsp", Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 6, Seed: 3, Options: &WBSPOptions{Period: 3}}, 3},
	} {
		cfg := j.cfg
		plain := runCkptJob(t, ckptJob{cfg: cfg, size: j.size, cancelAt: -1})
		cfg = j.cfg
		cfg.Options = cloneOptions(j.cfg.Options)
		cfg.Outer = "sgd"
		outer := runCkptJob(t, ckptJob{cfg: cfg, size: j.size, cancelAt: -1})
		if plain.err != nil || outer.err != nil {
			t.Fatal(plain.err, outer.err)
		}
		if !slices.Equal(plain.params[0], outer.params[0]) {
			t.Fatalf("%s: --outer sgd (rate 1, no momentum) differs from the plain average", j.cfg.Strategy)
		}
	}
}

// cloneOptions copies a WBSPOptions, so each job configures its own.
func cloneOptions(o Options) Options {
	if w, ok := o.(*WBSPOptions); ok {
		c := *w
		return &c
	}
	return o
}

// roundUpdate with Nesterov momentum follows DiLoCo's outer step on the pseudo-gradient
// g = −ΣΔ/N: v ← g on the first round, then v ← μ·v + g; w ← w − η·(g + μ·v).
func TestOuterNesterovRule(t *testing.T) {
	cfg := Config{Outer: OuterNesterov}
	w := &Worker{Cfg: &cfg, optimizers: Builtin().Optimizers()}
	opt, err := w.newOuter()
	if err != nil {
		t.Fatal(err)
	}
	const size = 4
	eta, mu := DefaultOuterNesterovLR, DefaultOuterNesterovMomentum
	got := []float32{1, -2, 0.5}
	want := []float64{1, -2, 0.5}
	v := make([]float64, len(want))
	sums := [][]float32{{0.4, -0.8, 0.2}, {-0.1, 0.3, 0.05}, {0.25, 0.25, -0.5}}
	for round, sum := range sums {
		roundUpdate(opt, got, sum, 1, size)
		for i := range want {
			g := -float64(sum[i]) / size
			if round == 0 {
				v[i] = g
			} else {
				v[i] = mu*v[i] + g
			}
			want[i] -= eta * (g + mu*v[i])
		}
		for i := range want {
			if d := float64(got[i]) - want[i]; d > 1e-6 || d < -1e-6 {
				t.Fatalf("round %d: w[%d] = %v, want %v", round, i, got[i], want[i])
			}
		}
	}
}

// A run with an outer optimizer resumed from its checkpoint ends bitwise where the
// uninterrupted run ends: the outer state (Nesterov's velocity) is in the checkpoint.
func TestResumeWithOuterIsBitwise(t *testing.T) {
	const rounds = 16
	for _, strategy := range []struct {
		name string
		size int
		opts Options
	}{{"esync", 1, nil}, {"wbsp", 2, &WBSPOptions{Period: 2}}} {
		t.Run(strategy.name, func(t *testing.T) {
			cfg := Config{Strategy: strategy.name, Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: rounds, Seed: 3, Outer: OuterNesterov, Options: strategy.opts}
			whole := runCkptJob(t, ckptJob{cfg: cfg, size: strategy.size, cancelAt: -1})
			if whole.err != nil {
				t.Fatal(whole.err)
			}
			dir := t.TempDir()
			if killed := runCkptJob(t, ckptJob{cfg: cfg, size: strategy.size, cancelAt: 9, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 4}}}); killed.err == nil {
				t.Fatal("the killed job did not fail")
			}
			resumed := runCkptJob(t, ckptJob{cfg: cfg, size: strategy.size, cancelAt: -1, resume: dir})
			if resumed.err != nil {
				t.Fatal(resumed.err)
			}
			for r := range strategy.size {
				if !slices.Equal(resumed.params[r], whole.params[r]) {
					t.Fatalf("rank %d: the resumed model differs from the uninterrupted one", r)
				}
			}
		})
	}
}

// Settings the outer optimizer cannot honour are refused, naming the flag.
func TestOuterRefusals(t *testing.T) {
	m := 0.5
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Strategy: "ssgd", Outer: OuterNesterov}, "--outer nesterov) applies to"},
		{Config{Strategy: "wbsp", Collective: "ps", Outer: OuterNesterov}, "wbsp over ps has none"},
		{Config{Strategy: "esync", Outer: "rmsprop"}, `--outer) "rmsprop": unknown`},
		{Config{Strategy: "esync", Outer: "adam"}, "--outer-lr): required with --outer adam"},
		{Config{Strategy: "esync", OuterLR: 0.5}, "give --outer too"},
		{Config{Strategy: "esync", Outer: "adam", OuterLR: 0.1, OuterMomentum: &m}, "--outer adam takes no momentum"},
		{Config{Strategy: "esync", Outer: OuterNesterov, Options: &ESyncConfig{GlobalLR: 0.5}}, "--global-lr 0.5"},
	} {
		cfg := c.cfg
		cfg.Defaults()
		err := Builtin().Validate(&cfg, 2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.cfg, err, c.want)
		}
	}
	cfg := Config{Strategy: "esync", Outer: OuterNesterov}
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, 2); err != nil {
		t.Fatal(err)
	}
	if cfg.OuterLR != DefaultOuterNesterovLR || cfg.OuterMomentum == nil || *cfg.OuterMomentum != DefaultOuterNesterovMomentum {
		t.Errorf("validated --outer nesterov records rate %v, momentum %v; want the defaults %v, %v",
			cfg.OuterLR, cfg.OuterMomentum, DefaultOuterNesterovLR, DefaultOuterNesterovMomentum)
	}
}
