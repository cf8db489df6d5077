package trainer

import (
	"fmt"
	"strings"

	"github.com/hetsync/hetsync/optim"
)

// Optimizer is the workers' optimizer (optim.Optimizer): what a Stepped strategy's built-in
// loop steps in a caller's place, and what Worker.Apply applies.
type Optimizer = optim.Optimizer

// SGD is optim's SGD, the default optimizer, whose fields strategies that carry or reset its
// momentum (Sync-Switch) and programs' own loops use directly.
type SGD = optim.SGD

// DefaultOptimizer is the optimizer of a Config whose Optimizer is empty.
const DefaultOptimizer = "sgd"

// optimizerName is cfg's optimizer: Config.Optimizer, or DefaultOptimizer when empty.
func (c *Config) optimizerName() string {
	if c.Optimizer == "" {
		return DefaultOptimizer
	}
	return c.Optimizer
}

// optimizerSetting is one of Config's optimizer settings: its name (optim.Setting*, the
// flag), its field's name, and whether the configuration gives it.
type optimizerSetting struct {
	name, field string
	given       bool
}

// optimizerSettings are cfg's optimizer settings other than the learning rate.
func (c *Config) optimizerSettings() []optimizerSetting {
	return []optimizerSetting{
		{optim.SettingMomentum, "Config.Momentum", c.Momentum != 0},
		{optim.SettingDampening, "Config.Dampening", c.Dampening != 0},
		{optim.SettingNesterov, "Config.Nesterov", c.Nesterov},
		{optim.SettingBeta1, "Config.Beta1", c.Beta1 != nil},
		{optim.SettingBeta2, "Config.Beta2", c.Beta2 != nil},
		{optim.SettingEps, "Config.Eps", c.Eps != nil},
		{optim.SettingWeightDecay, "Config.WeightDecay", c.WeightDecay != 0},
	}
}

// settings are the optimizer settings of cfg at learning rate lr and momentum m (a strategy's
// local steps may take their own), the factory's defaults standing for Beta1, Beta2 and Eps
// not given.
func (c *Config) settings(f optim.Factory, lr, m float64) optim.Settings {
	s := optim.Settings{LR: lr, Momentum: m, Dampening: c.Dampening, Nesterov: c.Nesterov, WeightDecay: c.WeightDecay,
		Beta1: f.Defaults.Beta1, Beta2: f.Defaults.Beta2, Eps: f.Defaults.Eps}
	for _, o := range []struct {
		given *float64
		into  *float64
	}{{c.Beta1, &s.Beta1}, {c.Beta2, &s.Beta2}, {c.Eps, &s.Eps}} {
		if o.given != nil {
			*o.into = *o.given
		}
	}
	return s
}

// checkOptimizer checks cfg's optimizer against the registry opts: a known name, no setting
// that the optimizer does not use (it would be ignored), and settings the optimizer accepts.
// It fills in the defaults of the settings the optimizer uses and cfg leaves unset (Beta1,
// Beta2, Eps), so that config.json records what the run used.
func checkOptimizer(opts *optim.Registry, cfg *Config) error {
	name := cfg.optimizerName()
	f, err := opts.Lookup(name)
	if err != nil {
		return fmt.Errorf("trainer: Config.Optimizer %q: unknown (known: %s)", name, strings.Join(opts.Names(), ", "))
	}
	for _, s := range cfg.optimizerSettings() {
		if s.given && !f.UsesSetting(s.name) {
			var users []string
			for _, n := range opts.Names() {
				if g, _ := opts.Lookup(n); g.UsesSetting(s.name) {
					users = append(users, n)
				}
			}
			return fmt.Errorf("trainer: %s is a setting of Config.Optimizer %s; Config.Optimizer %s does not take it", s.field, strings.Join(users, ", "), name)
		}
	}
	s := cfg.settings(f, cfg.LR, cfg.Momentum)
	for _, d := range []struct {
		setting string
		p       **float64
		v       float64
	}{{optim.SettingBeta1, &cfg.Beta1, s.Beta1}, {optim.SettingBeta2, &cfg.Beta2, s.Beta2}, {optim.SettingEps, &cfg.Eps, s.Eps}} {
		if *d.p == nil && f.UsesSetting(d.setting) {
			v := d.v
			*d.p = &v
		}
	}
	if _, err := f.New(s); err != nil {
		return fmt.Errorf("trainer: Config.Optimizer %s: %w", name, err)
	}
	return nil
}

// newOptimizer builds cfg's optimizer from opts at learning rate lr and momentum m.
func newOptimizer(opts *optim.Registry, cfg *Config, lr, m float64) (Optimizer, error) {
	name := cfg.optimizerName()
	f, err := opts.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("trainer: Config.Optimizer %q: unknown (known: %s)", name, strings.Join(opts.Names(), ", "))
	}
	if m != 0 && !f.UsesSetting(optim.SettingMomentum) {
		return nil, fmt.Errorf("trainer: a momentum of %v for Config.Optimizer %s, which takes none", m, name)
	}
	o, err := f.New(cfg.settings(f, lr, m))
	if err != nil {
		return nil, fmt.Errorf("trainer: Config.Optimizer %s: %w", name, err)
	}
	return o, nil
}

// localOptimizer is implemented by strategies whose local steps run an optimizer of their
// own: the run's optimizer at another learning rate and momentum (ESync's η and local
// momentum), set by the flags it names.
type localOptimizer interface {
	LocalOptimizer() (lr, momentum float64, flags string)
}

// NewOptimizer builds the run's optimizer at learning rate lr and momentum m, for a
// strategy's local steps (localOptimizer): the flags that set them are named in its errors.
func (w *Worker) NewOptimizer(lr, m float64, flags string) (Optimizer, error) {
	o, err := newOptimizer(w.optimizers, w.Cfg, lr, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flags, err)
	}
	return o, nil
}

// updateRule is implemented by strategies whose model updates, or some of them, are not the
// workers' optimizer's: UpdateRule says whose they are, or "" when, as configured, every
// update is the workers' optimizer's. Such a strategy runs only with Config.Optimizer sgd,
// and without SGD's Nesterov momentum or dampening, which no server rule has
// (checkStrategyOptimizer).
type updateRule interface{ UpdateRule() string }

// checkStrategyOptimizer refuses an optimizer other than plain or momentum SGD for a strategy
// whose updates are not the workers' optimizer's, rather than train with another rule than
// the one asked for. (Such a strategy's server rule has always ignored Config.Momentum and
// Config.WeightDecay, as documented, and still does.)
func checkStrategyOptimizer(strat Strategy, cfg *Config) error {
	u, ok := strat.(updateRule)
	if !ok || !cfg.beyondSGD() {
		return nil
	}
	why := u.UpdateRule()
	switch {
	case why == "":
		return nil
	case cfg.optimizerName() != DefaultOptimizer:
		return fmt.Errorf("trainer: Config.Optimizer %s: Config.Strategy %s %s; use Config.Optimizer %s", cfg.optimizerName(), cfg.Strategy, why, DefaultOptimizer)
	case cfg.Nesterov:
		return fmt.Errorf("trainer: Config.Nesterov: Config.Strategy %s %s, which has no Nesterov momentum", cfg.Strategy, why)
	}
	return fmt.Errorf("trainer: Config.Dampening %v: Config.Strategy %s %s, which has no dampening", cfg.Dampening, cfg.Strategy, why)
}

// beyondSGD says whether cfg asks for more than plain or momentum SGD: another optimizer, or
// SGD's Nesterov momentum or dampening.
func (c *Config) beyondSGD() bool {
	return c.optimizerName() != DefaultOptimizer || c.Nesterov || c.Dampening != 0
}

// The strategies whose updates are their parameter server's rule, not the workers'
// optimizer's. Their methods stand here, beside the check they serve.

func (s *asgd) UpdateRule() string {
	return "updates the model with its parameter server's rule (plain SGD at Config.LR on each pushed gradient)"
}

func (s *dcasgd) UpdateRule() string {
	return "updates the model with its parameter server's rule (delay-compensated SGD at Config.LR)"
}

func (s *ssp) UpdateRule() string {
	if s.opts != nil && s.opts.Pull == "lazy" {
		return "" // the workers step their own copies and push the change
	}
	return "updates the model with its parameter server's rule (plain SGD at Config.LR on each pushed gradient; --ssp-pull lazy steps the workers' optimizer)"
}

func (s *syncSwitch) UpdateRule() string {
	return "carries SGD's momentum to its parameter server's momentum rule at the switch"
}

// SGD is w's optimizer as SGD, for strategies that carry or reset SGD's momentum
// (Sync-Switch), or nil when the run's optimizer is another (checkStrategyOptimizer refuses
// those strategies any other).
func (w *Worker) SGD() *SGD {
	s, _ := w.Opt.(*SGD)
	return s
}
