package trainer

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is one training run as every rank sees it. The same Config (with the same Seed) must
// reach every rank: strategies rely on all ranks agreeing on it, and Run checks at its start
// that they do (agree.go), naming each field that differs, its values and the ranks holding
// them. Only the fields tagged agree:"per-rank" (the heterogeneity a rank injects) are a
// rank's own. The errors of this package name a field as a Go program sets it (Config.LR);
// its flag tag is the `hetsync train` flag that sets it, which InFlags names instead.
type Config struct {
	// Strategy is the synchronization strategy's registered name (see Strategies).
	Strategy string `json:"strategy" flag:"sync"`
	// Collective is the collective the strategy's rounds run over (collective.Algorithms; ps
	// is the parameter server). Empty takes the strategy's default (Registry.Configure): auto,
	// or the first collective of a strategy that supports only some (Factory.Collectives).
	Collective string `json:"collective" flag:"collective"`
	// Compress is how the rounds' vectors travel (collective.ParseCompression): empty or none
	// as float32; bf16, fp16 or int8 encoded, reduced in float32, with error feedback; auto:
	// int8 between hosts only. Only strategies whose Factory says Compresses take it.
	Compress string `json:"compress,omitempty" flag:"compress"`
	// Batch is the per-rank mini-batch size: the samples of one Model.Step. Rank 0 counts
	// epochs and judges the coming round's progress with it, and GradReduction "sum" scales
	// the model's mean gradient by it.
	Batch int `json:"batch" flag:"batch"`
	// LR is the learning rate applied to the gradient as GradReduction defines it.
	LR float64 `json:"lr" flag:"lr"`
	// Optimizer is the workers' optimizer, a name of the registry's optimizers
	// (Registry.Optimizers: sgd, adam, adamw and a program's own); empty means sgd. The
	// strategies whose updates are a parameter server's rule (asgd, dcasgd, ssp with
	// every-step pulls, sync-switch) run only with sgd.
	Optimizer string `json:"optimizer,omitempty" flag:"optimizer"`
	// Momentum, Dampening and Nesterov are SGD's (PyTorch semantics): the asynchronous
	// server rule of asgd is plain SGD, which ignores the momentum. A momentum not given is 0
	// under another optimizer (DefaultsUnset). WeightDecay is every built-in optimizer's:
	// an L2 penalty in SGD's and Adam's gradient, AdamW's decoupled decay.
	Momentum    float64 `json:"momentum" flag:"momentum"`
	Dampening   float64 `json:"dampening,omitempty" flag:"dampening"`
	Nesterov    bool    `json:"nesterov,omitempty" flag:"nesterov"`
	WeightDecay float64 `json:"weight_decay" flag:"weight-decay"`
	// Beta1, Beta2 and Eps are Adam's and AdamW's; nil takes torch's defaults (0.9, 0.999,
	// 1e-8), which Registry.Validate then records here. A zero Beta1 is a valid choice, so
	// nil, not zero, means the default.
	Beta1 *float64 `json:"beta1,omitempty" flag:"beta1"`
	Beta2 *float64 `json:"beta2,omitempty" flag:"beta2"`
	Eps   *float64 `json:"eps,omitempty" flag:"eps"`
	// Outer is the outer optimizer of the strategies whose rounds average local steps (esync,
	// wbsp and wbsp-opt over an allreduce; see outer.go): "" or "none" keeps the strategy's
	// own update; "nesterov" (DiLoCo's) or an optimizer of the registry ("sgd", "adam", ...)
	// steps the global model with the round's pseudo-gradient −ΣΔ/N at OuterLR (default 0.7
	// for nesterov, 1 for sgd) with OuterMomentum (default 0.9 for nesterov, 0 for sgd).
	Outer         string   `json:"outer,omitempty" flag:"outer"`
	OuterLR       float64  `json:"outer_lr,omitempty" flag:"outer-lr"`
	OuterMomentum *float64 `json:"outer_momentum,omitempty" flag:"outer-momentum"`
	// GradReduction says how a rank's gradient reduces its batch: "mean" (the gradient of the
	// mean loss) or "sum" (the gradient of the summed loss, ESync's convention: lr 5e-4 with
	// sum equals lr 0.032 with mean at batch 64). Across ranks, synchronous strategies always
	// average. Empty means "mean".
	GradReduction string `json:"grad_reduction" flag:"grad-reduction"`
	// Seed makes the run reproducible: model initialisation and batch order derive from it.
	Seed uint64 `json:"seed" flag:"seed"`

	// Stop conditions, decided by rank 0 and agreed by all ranks (see Run). Zero disables one.
	TargetAcc float64       `json:"target_acc,omitempty" flag:"target-acc"`
	Epochs    float64       `json:"epochs,omitempty" flag:"epochs"`
	MaxTime   time.Duration `json:"max_time,omitempty" flag:"max-time"`
	MaxRounds int           `json:"max_rounds,omitempty" flag:"max-rounds"`

	// Eval is how often rank 0 evaluates a snapshot on the test set; the zero value means
	// every 20 rounds.
	Eval EvalEvery `json:"eval_every" flag:"eval-every"`

	// The heterogeneity injected into a rank is that rank's own (agree:"per-rank": the ranks
	// need not agree on it, and Run does not check that they do): it changes how fast a rank
	// steps, never what the steps compute, and a rank may measure its own (--slowdown-base
	// tfast). Every other field must be the same on every rank, and Run checks it.
	//
	// Slowdown[i] is rank i's slowdown factor f_i ≥ 1: after each local step it sleeps
	// (f_i−1)× the step's compute time, or, when SlowdownBase is set, until the step has taken
	// f_i × SlowdownBase. StepSleep[i] is a fixed sleep per step. Both count as compute time.
	// Empty means no injection; otherwise one entry per rank.
	Slowdown  []float64       `json:"slowdown,omitempty" flag:"slowdown" agree:"per-rank"`
	StepSleep []time.Duration `json:"step_sleep,omitempty" flag:"step-sleep" agree:"per-rank"`
	// SlowdownBase is the step time of a device with factor 1 (--slowdown-base): a rank with
	// factor f (1 included) then takes at least f × SlowdownBase per step, however busy the
	// host's other ranks make its own computation (Injector). 0 scales each step's own compute
	// time instead.
	SlowdownBase time.Duration `json:"slowdown_base,omitempty" flag:"slowdown-base" agree:"per-rank"`

	// Stragglers are transient stragglers injected into any strategy (straggler.go).
	Stragglers StragglerConfig `json:"stragglers,omitempty" flag:"stragglers" agree:"per-rank"`

	// Options are the strategy's own options: a value its registry's Factory.Options
	// returned; nil takes the strategy's defaults (Registry.Configure).
	Options Options `json:"options,omitempty"`

	// checked is the validation this value passed (Registry.Validate). A configuration is
	// validated where it enters (the command's flags, a program's Train) and then carried as
	// one value through the entry points after it (workload.RunRank, trainer.RunRank, Train),
	// which see the mark and do not check it again; a value changed since is checked anew.
	checked *checkMark
}

// checkMark says which registry validated a Config for a job of how many ranks, and what the
// Config was then (its JSON, the options included), so that a change after it is seen.
type checkMark struct {
	reg   *Registry
	size  int
	value string
}

// configField is a field's name in this package's errors: Config. and the Go name.
var configField = regexp.MustCompile(`\bConfig\.[A-Z][A-Za-z0-9]*\b`)

// InFlags is err for the command line: every Config field it names (Config.LR) is named as
// the `hetsync train` flag that sets it (--lr, the field's flag tag); the rest of the text
// stays, and errors.Is and errors.As still see err.
func InFlags(err error) error {
	if err == nil {
		return nil
	}
	t := reflect.TypeFor[Config]()
	text := configField.ReplaceAllStringFunc(err.Error(), func(name string) string {
		if f, ok := t.FieldByName(strings.TrimPrefix(name, "Config.")); ok && f.Tag.Get("flag") != "" {
			return "--" + f.Tag.Get("flag")
		}
		return name
	})
	return &flagError{text: text, err: err}
}

// flagError is InFlags' error.
type flagError struct {
	text string
	err  error
}

func (e *flagError) Error() string { return e.text }
func (e *flagError) Unwrap() error { return e.err }

// Defaults fills the zero fields with the defaults of `hetsync train`: strategy ssgd, batch
// 64, DefaultLR and, with no stop condition other than TargetAcc, 3 epochs; then the
// documented meaning of the other zero fields (ZeroDefaults). Train does not call it: a
// program names its strategy, batch, learning rate and bound, and Train refuses a zero one.
func (c *Config) Defaults() { c.DefaultsUnset(func(string) bool { return false }) }

// DefaultsUnset is Defaults for a Config read from flags, where given reports whether the
// flag of a field (its flag tag: "batch") was given: a batch or learning rate given as zero
// keeps it, for Validate to refuse. Left unset, a zero means the default; typed on a command
// line, it is a mistake. A momentum not given (the command's default, 0.9) is SGD's and
// becomes 0 under another optimizer, which would refuse it.
func (c *Config) DefaultsUnset(given func(flag string) bool) {
	if c.Strategy == "" {
		c.Strategy = "ssgd"
	}
	if c.Batch == 0 && !given("batch") {
		c.Batch = 64
	}
	if !given("momentum") && c.optimizerName() != DefaultOptimizer {
		c.Momentum = 0 // the command's default momentum is SGD's
	}
	c.ZeroDefaults()
	if c.LR == 0 && !given("lr") {
		c.LR = DefaultLR(c.GradReduction, c.Batch)
	}
	if c.Epochs == 0 && c.MaxTime == 0 && c.MaxRounds == 0 {
		c.Epochs = 3
	}
}

// DefaultConfig is the zero Config with Defaults applied: what `hetsync train` runs when given
// no flag, and the defaults its flags show.
func DefaultConfig() Config {
	var c Config
	c.Defaults()
	return c
}

// ZeroDefaults gives the fields whose zero value documents a default that value: GradReduction
// "" is "mean", an Eval of zero evaluates every 20 rounds, and a straggler Mode "" is
// "network". Registry.Validate, and so Train, applies it.
func (c *Config) ZeroDefaults() {
	if c.GradReduction == "" {
		c.GradReduction = "mean"
	}
	if c.Eval.Rounds == 0 && c.Eval.Interval == 0 {
		c.Eval.Rounds = 20
	}
	if c.Stragglers.Enabled() && c.Stragglers.Mode == "" {
		c.Stragglers.Mode = "network"
	}
}

// DefaultLR is the default learning rate: 0.05 for mean-reduced gradients, the same step for
// summed ones (0.05/batch).
func DefaultLR(gradReduction string, batch int) float64 {
	if gradReduction == "sum" && batch > 0 {
		return 0.05 / float64(batch)
	}
	return 0.05
}

// Validate checks the common settings of c for a job of size ranks; Registry.Validate also
// checks the strategy's name and options.
func (c *Config) Validate(size int) error {
	if size < 1 {
		return fmt.Errorf("trainer: job size must be ≥ 1, got %d", size)
	}
	switch {
	case c.Batch < 1:
		return fmt.Errorf("trainer: Config.Batch must be ≥ 1, got %d", c.Batch)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("trainer: Config.LR must be a positive number, got %v", c.LR)
	case c.Momentum < 0 || c.Momentum >= 1 || math.IsNaN(c.Momentum):
		return fmt.Errorf("trainer: Config.Momentum must be in [0, 1), got %v", c.Momentum)
	case c.WeightDecay < 0 || math.IsNaN(c.WeightDecay) || math.IsInf(c.WeightDecay, 0):
		return fmt.Errorf("trainer: Config.WeightDecay must be ≥ 0, got %v", c.WeightDecay)
	case c.GradReduction != "mean" && c.GradReduction != "sum":
		return fmt.Errorf("trainer: Config.GradReduction must be mean or sum, got %q", c.GradReduction)
	case c.TargetAcc < 0 || c.TargetAcc > 1 || math.IsNaN(c.TargetAcc):
		return fmt.Errorf("trainer: Config.TargetAcc must be in [0, 1], got %v", c.TargetAcc)
	case c.Epochs < 0 || math.IsNaN(c.Epochs) || math.IsInf(c.Epochs, 0):
		return fmt.Errorf("trainer: Config.Epochs must be ≥ 0, got %v", c.Epochs)
	case c.MaxTime < 0:
		return fmt.Errorf("trainer: Config.MaxTime must be ≥ 0, got %v", c.MaxTime)
	case c.MaxRounds < 0:
		return fmt.Errorf("trainer: Config.MaxRounds must be ≥ 0, got %d", c.MaxRounds)
	case c.Epochs == 0 && c.MaxTime == 0 && c.MaxRounds == 0:
		return fmt.Errorf("trainer: no bound on the run: set Config.Epochs, Config.MaxTime or Config.MaxRounds")
	}
	if err := c.Stragglers.Validate(size); err != nil {
		return err
	}
	if err := c.Eval.Validate(); err != nil {
		return err
	}
	if len(c.Slowdown) != 0 && len(c.Slowdown) != size {
		return fmt.Errorf("trainer: Config.Slowdown has %d factors for %d ranks (give one per rank)", len(c.Slowdown), size)
	}
	for i, f := range c.Slowdown {
		if !(f >= 1) || math.IsInf(f, 0) {
			return fmt.Errorf("trainer: Config.Slowdown factor of rank %d must be a finite number ≥ 1, got %v", i, f)
		}
	}
	if c.SlowdownBase < 0 {
		return fmt.Errorf("trainer: Config.SlowdownBase must be ≥ 0, got %v", c.SlowdownBase)
	}
	if len(c.StepSleep) != 0 && len(c.StepSleep) != size {
		return fmt.Errorf("trainer: Config.StepSleep has %d entries for %d ranks (give one per rank)", len(c.StepSleep), size)
	}
	for i, d := range c.StepSleep {
		if d < 0 {
			return fmt.Errorf("trainer: Config.StepSleep of rank %d must be ≥ 0, got %v", i, d)
		}
	}
	return nil
}

// EvalEvery is an evaluation period: every Rounds rounds or every Interval of wall time.
// Exactly one is set.
type EvalEvery struct {
	Rounds   int           `json:"rounds,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
}

// ParseEvalEvery reads "20" (rounds) or "5s" (a Go duration).
func ParseEvalEvery(s string) (EvalEvery, error) { return ParseEvery("eval-every", s) }

// ParseEvery reads a period given to the flag named flag: "20" (rounds) or "5s" (a Go
// duration).
func ParseEvery(flag, s string) (EvalEvery, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		e := EvalEvery{Rounds: n}
		return e, e.validate("--" + flag)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return EvalEvery{}, fmt.Errorf("trainer: --%s %q is neither a round count (20) nor a duration (5s)", flag, s)
	}
	e := EvalEvery{Interval: d}
	return e, e.validate("--" + flag)
}

// Validate checks that exactly one period is set and positive.
func (e EvalEvery) Validate() error { return e.validate("Config.Eval") }

// validate names the period what in its errors: a flag (--eval-every) or a field.
func (e EvalEvery) validate(what string) error {
	switch {
	case e.Rounds < 0 || e.Interval < 0:
		return fmt.Errorf("trainer: %s must be positive, got %v", what, e)
	case (e.Rounds == 0) == (e.Interval == 0):
		return fmt.Errorf("trainer: %s needs exactly one of a round count or a duration, got %v", what, e)
	}
	return nil
}

func (e EvalEvery) String() string {
	if e.Interval > 0 {
		return e.Interval.String()
	}
	return strconv.Itoa(e.Rounds)
}

// ParseFloatList reads a comma-separated list of numbers ("1,1,2,4").
func ParseFloatList(flag, s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]float64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("trainer: --%s entry %d (%q) is not a number", flag, i, p)
		}
		out[i] = v
	}
	return out, nil
}

// ParseMillisList reads a comma-separated list of milliseconds ("0,0,10,20") or durations
// ("0,0,10ms,1.5s").
func ParseMillisList(flag, s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]time.Duration, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if v, err := strconv.ParseFloat(p, 64); err == nil {
			out[i] = time.Duration(v * float64(time.Millisecond))
			continue
		}
		d, err := time.ParseDuration(p)
		if err != nil {
			return nil, fmt.Errorf("trainer: --%s entry %d (%q) is neither milliseconds nor a duration", flag, i, p)
		}
		out[i] = d
	}
	return out, nil
}
