package trainer

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/optim"
	"github.com/hetsync/hetsync/transport"
)

func ptr(v float64) *float64 { return &v }

// TestOptimizerConfigRefusedNamingTheFlag: an unknown optimizer, a setting the optimizer does
// not take, a setting it refuses, and an optimizer other than sgd for a strategy whose
// updates are its parameter server's are errors naming the flag (through InFlags) and, where
// one is at fault, the strategy; the configurations that work pass.
func TestOptimizerConfigRefusedNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string // "" for a valid configuration
	}{
		{"default", func(*Config) {}, ""},
		{"sgd named", func(c *Config) { c.Optimizer = "sgd"; c.Nesterov = true; c.Dampening = 0 }, ""},
		{"adam", func(c *Config) { c.Optimizer = "adam"; c.Momentum = 0; c.Beta1 = ptr(0) }, ""},
		{"adamw with decay", func(c *Config) { c.Optimizer = "adamw"; c.Momentum = 0; c.WeightDecay = 0.01 }, ""},
		{"unknown", func(c *Config) { c.Optimizer = "lion" }, `--optimizer "lion": unknown (known: adam, adamw, sgd)`},
		{"beta1 under sgd", func(c *Config) { c.Beta1 = ptr(0.9) }, "--beta1 is a setting of --optimizer adam, adamw; --optimizer sgd does not take it"},
		{"momentum under adam", func(c *Config) { c.Optimizer = "adam" }, "--momentum is a setting of --optimizer sgd; --optimizer adam does not take it"},
		{"nesterov under adamw", func(c *Config) { c.Optimizer = "adamw"; c.Momentum = 0; c.Nesterov = true }, "--nesterov is a setting of --optimizer sgd"},
		{"nesterov with dampening", func(c *Config) { c.Nesterov = true; c.Dampening = 0.1 }, "--optimizer sgd: optim: sgd: --nesterov needs --momentum > 0 and --dampening 0"},
		{"dampening above 1", func(c *Config) { c.Dampening = 2 }, "--dampening must be in [0, 1]"},
		{"beta2 of 1", func(c *Config) { c.Optimizer = "adam"; c.Momentum = 0; c.Beta2 = ptr(1) }, "--optimizer adam: optim: adam: --beta2 must be in [0, 1)"},
		{"eps of 0", func(c *Config) { c.Optimizer = "adamw"; c.Momentum = 0; c.Eps = ptr(0) }, "--eps must be a positive number"},
		{"asgd", func(c *Config) { c.Strategy = "asgd"; c.Optimizer = "adam"; c.Momentum = 0 }, "--optimizer adam: --sync asgd updates the model with its parameter server's rule"},
		{"dcasgd", func(c *Config) { c.Strategy = "dcasgd"; c.Optimizer = "adam"; c.Momentum = 0 }, "--sync dcasgd updates the model with its parameter server's rule"},
		{"ssp", func(c *Config) { c.Strategy = "ssp"; c.Optimizer = "adamw"; c.Momentum = 0 }, "--sync ssp updates the model"},
		{"ssp lazy", func(c *Config) {
			c.Strategy, c.Optimizer, c.Momentum = "ssp", "adam", 0
			c.Options = &SSPOptions{Pull: "lazy"}
		}, ""},
		{"sync-switch", func(c *Config) { c.Strategy = "sync-switch"; c.Optimizer = "adam"; c.Momentum = 0 }, "--sync sync-switch carries SGD's momentum"},
		{"sync-switch nesterov", func(c *Config) { c.Strategy = "sync-switch"; c.Nesterov = true }, "--nesterov: --sync sync-switch carries SGD's momentum to its parameter server's momentum rule at the switch, which has no Nesterov momentum"},
		{"asgd dampening", func(c *Config) { c.Strategy = "asgd"; c.Dampening = 0.5 }, "--dampening 0.5: --sync asgd updates the model"},
		{"asgd momentum, as always", func(c *Config) { c.Strategy = "asgd"; c.WeightDecay = 0.01 }, ""},
		{"esync", func(c *Config) { c.Strategy = "esync"; c.Optimizer = "adam"; c.Momentum = 0 }, ""},
		{"esync local momentum", func(c *Config) {
			c.Strategy, c.Optimizer, c.Momentum = "esync", "adam", 0
			c.Options = &ESyncConfig{LocalMomentum: ptr(0.5)}
		}, "--sync esync's local steps (--local-lr, --local-momentum): trainer: a momentum of 0.5 for --optimizer adam, which takes none"},
		{"wbsp over ps", func(c *Config) { c.Strategy = "wbsp"; c.Collective = "ps"; c.Optimizer = "adam"; c.Momentum = 0 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Strategy: "ssgd", Momentum: 0.9, MaxRounds: 3}
			cfg.Defaults() // before the case's settings: a program's Config takes no defaults
			tc.cfg(&cfg)
			err := InFlags(Builtin().Validate(&cfg, 3))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestOptimizerDefaultsRecorded: Validate records the Adam defaults it used (config.json
// shows them), keeps a given zero Beta1, and leaves sgd's configuration as it was.
func TestOptimizerDefaultsRecorded(t *testing.T) {
	cfg := Config{Strategy: "ssgd", Optimizer: "adam", Beta1: ptr(0), MaxRounds: 1}
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, 1); err != nil {
		t.Fatal(err)
	}
	if cfg.Beta1 == nil || *cfg.Beta1 != 0 || cfg.Beta2 == nil || *cfg.Beta2 != 0.999 || cfg.Eps == nil || *cfg.Eps != 1e-8 {
		t.Fatalf("beta1 %v, beta2 %v, eps %v; want 0, 0.999, 1e-8", cfg.Beta1, cfg.Beta2, cfg.Eps)
	}
	plain := Config{Strategy: "ssgd", Momentum: 0.9, MaxRounds: 1}
	plain.Defaults()
	if err := Builtin().Validate(&plain, 1); err != nil {
		t.Fatal(err)
	}
	if plain.Beta1 != nil || plain.Beta2 != nil || plain.Eps != nil || plain.Optimizer != "" {
		t.Fatalf("sgd's configuration gained Adam's settings: %+v", plain)
	}
}

// TestOptimizerFlags: the optimizer's flags set Config in train's words, and a momentum not
// given is SGD's default only: under adam it is 0 rather than refused.
func TestOptimizerFlags(t *testing.T) {
	cfg, err := ConfigFromFlags(Builtin(), [][2]string{{"optimizer", "adamw"}, {"beta1", "0.8"}, {"beta2", "0.99"}, {"eps", "1e-6"}, {"weight-decay", "0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Optimizer != "adamw" || *cfg.Beta1 != 0.8 || *cfg.Beta2 != 0.99 || *cfg.Eps != 1e-6 || cfg.WeightDecay != 0.1 {
		t.Fatalf("config %+v", cfg)
	}
	cfg, err = ConfigFromFlags(Builtin(), [][2]string{{"momentum", "0.9"}, {"nesterov", "true"}, {"dampening", "0"}})
	if err != nil || !cfg.Nesterov || cfg.Momentum != 0.9 {
		t.Fatalf("config %+v, %v", cfg, err)
	}
	if _, err := ConfigFromFlags(Builtin(), [][2]string{{"nesterov", "maybe"}}); err == nil || !strings.Contains(err.Error(), "--nesterov") {
		t.Fatalf("got %v, want an error naming --nesterov", err)
	}
	c := Config{Optimizer: "adam", Momentum: 0.9}
	c.DefaultsUnset(func(string) bool { return false })
	if c.Momentum != 0 {
		t.Fatalf("momentum %v under adam when not given, want 0", c.Momentum)
	}
	c = Config{Optimizer: "adam", Momentum: 0.9}
	c.DefaultsUnset(func(f string) bool { return f == "momentum" })
	if c.Momentum != 0.9 {
		t.Fatal("a momentum given was dropped: Validate must see it, and refuse it")
	}
}

// TestResumeWithEachOptimizerIsBitwise kills an ssgd job (3 ranks) and an esync job (1
// rank, whose rounds are deterministic) after a checkpoint and resumes them, under each
// optimizer: the resumed job ends with the uninterrupted job's model bitwise, which holds
// only if the optimizer's state (Adam's step count and moments, SGD's velocity) came back
// exactly, from the checkpoint's optimizer part (ssgd) or the strategy's own (esync).
func TestResumeWithEachOptimizerIsBitwise(t *testing.T) {
	const rounds = 16
	for _, strategy := range []struct {
		name string
		size int
	}{{"ssgd", 3}, {"esync", 1}} {
		for _, o := range []struct {
			name string
			cfg  func(*Config)
		}{
			{"sgd-nesterov", func(c *Config) { c.Nesterov = true }},
			{"sgd-dampening", func(c *Config) { c.Dampening = 0.5 }},
			{"adam", func(c *Config) { c.Optimizer, c.Momentum, c.LR = "adam", 0, 0.01 }},
			{"adamw", func(c *Config) { c.Optimizer, c.Momentum, c.LR, c.WeightDecay = "adamw", 0, 0.01, 0.05 }},
		} {
			t.Run(strategy.name+"-"+o.name, func(t *testing.T) {
				cfg := Config{Strategy: strategy.name, Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: rounds, Seed: 3}
				o.cfg(&cfg)
				whole := runCkptJob(t, ckptJob{cfg: cfg, size: strategy.size, cancelAt: -1})
				if whole.err != nil {
					t.Fatal(whole.err)
				}
				dir := t.TempDir()
				killed := runCkptJob(t, ckptJob{cfg: cfg, size: strategy.size, cancelAt: 9, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 4}}})
				if killed.err == nil {
					t.Fatal("the killed job did not fail")
				}
				ck, _, err := LoadCheckpoint(dir, 0)
				if err != nil {
					t.Fatal(err)
				}
				if ck.Round != 8 || ck.Optimizer != cfg.optimizerName() {
					t.Fatalf("checkpoint of round %d with the state of %q, want round 8 of %q", ck.Round, ck.Optimizer, cfg.optimizerName())
				}
				job := ckptJob{cfg: cfg, size: strategy.size, cancelAt: -1, resume: dir}
				if strategy.name == "ssgd" {
					if len(ck.OptimizerState) == 0 {
						t.Fatal("the checkpoint holds no optimizer state")
					}
					job = ckptJob{cfg: cfg, size: strategy.size, cancelAt: -1, opts: CheckpointOptions{Resume: ck, File: CheckpointPath(dir)}}
				}
				resumed := runCkptJob(t, job)
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
}

// TestResumeRefusesAnotherOptimizer: a checkpoint of an adam run does not continue under
// sgd, with an error naming the file and both optimizers.
func TestResumeRefusesAnotherOptimizer(t *testing.T) {
	cfg := Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.01, Optimizer: "adam", MaxRounds: 6, Seed: 3}
	dir := t.TempDir()
	if out := runCkptJob(t, ckptJob{cfg: cfg, size: 2, cancelAt: 3, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 2}}}); out.err == nil {
		t.Fatal("the killed job did not fail")
	}
	ck, err := ReadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer, cfg.Momentum = "sgd", 0.9
	out := runCkptJob(t, ckptJob{cfg: cfg, size: 2, cancelAt: -1, opts: CheckpointOptions{Resume: ck, File: CheckpointPath(dir)}})
	if out.err == nil || !strings.Contains(out.err.Error(), "holds the state of Config.Optimizer adam, this job runs Config.Optimizer sgd") || !strings.Contains(out.err.Error(), CheckpointPath(dir)) {
		t.Fatalf("got %v, want an error naming the file and both optimizers", out.err)
	}
}

// halfSGD is a program's own optimizer: plain SGD at half the learning rate it is given,
// under a name of its own.
type halfSGD struct{ *optim.SGD }

func (halfSGD) Name() string { return "half-sgd" }

// TestTrainStepsTheChosenOptimizer trains one rank with ssgd under adam and under a
// program's own optimizer (registered in the registry Train is given), and replays the same
// model's steps with that optimizer alone: the parameters are bitwise the replay's, so the
// strategy stepped the optimizer the configuration chose, once per step.
func TestTrainStepsTheChosenOptimizer(t *testing.T) {
	const rounds = 9
	reg := Builtin()
	if err := reg.Optimizers().Register("half-sgd", optim.Factory{
		New: func(s optim.Settings) (optim.Optimizer, error) {
			return halfSGD{&optim.SGD{LR: float32(s.LR / 2)}}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	train := newSynthSet(300, 1)
	for _, name := range []string{"adam", "half-sgd"} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Strategy: "ssgd", Collective: "ring", Batch: 8, LR: 0.01, Optimizer: name, MaxRounds: rounds, Seed: 5}
			model := func() Model {
				m, err := NewBatchModel(newSynthModel(cfg.Seed), &synthBatches{set: train.shard(0, 1), batch: cfg.Batch})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			trained := model()
			runRanks(t, transport.NewMemJob(1), cancel, func(_ int, ep transport.Endpoint) error {
				_, err := Train(ctx, ep, cfg, trained, TrainOptions{Strategies: reg})
				return err
			})
			replay := model()
			c := cfg
			if err := reg.Validate(&c, 1); err != nil {
				t.Fatal(err)
			}
			opt, err := newOptimizer(reg.Optimizers(), &c, c.LR, c.Momentum)
			if err != nil {
				t.Fatal(err)
			}
			p, g := replay.Params(), make([]float32, len(replay.Params()))
			for range rounds {
				if _, err := replay.Step(ctx, g); err != nil {
					t.Fatal(err)
				}
				opt.Step(p, g, 1)
			}
			if !slices.Equal(trained.Params(), p) {
				t.Fatalf("the trained parameters differ from %d steps of %s on the same batches", rounds, name)
			}
		})
	}
}

// TestCheckpointVersion1ReadsAsSGD: a checkpoint written before the optimizers were plug-ins
// (format version 1, SGD's velocity as float32 values) reads as sgd's state, the same bytes.
func TestCheckpointVersion1ReadsAsSGD(t *testing.T) {
	dir := t.TempDir()
	v2 := testCheckpoint(3, 12, 5)
	if err := WriteCheckpoint(dir, v2); err != nil {
		t.Fatal(err)
	}
	// The same checkpoint as version 1 wrote it: its header counts velocity values.
	raw, err := os.ReadFile(CheckpointPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	b := string(raw)
	b = strings.Replace(b, checkpointMagic, checkpointMagicV1, 1)
	b = strings.Replace(b, `"optimizer":"sgd",`, "", 1)
	b = strings.Replace(b, `"optimizer_bytes":12,`, `"num_velocity":3,`, 1)
	if err := os.WriteFile(CheckpointPath(dir), []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Optimizer != "sgd" || string(got.OptimizerState) != string(v2.OptimizerState) || got.version != 1 || !slices.Equal(got.Params, v2.Params) || string(got.State) != string(v2.State) {
		t.Fatalf("version 1 read as %+v", got)
	}
}
