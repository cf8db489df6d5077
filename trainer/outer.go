package trainer

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/hetsync/hetsync/optim"
)

// The outer optimizer (Config.Outer) of the strategies whose rounds average the ranks' local
// steps: each round's averaged delta ΣΔ/N, negated, is a pseudo-gradient, and the outer
// optimizer steps the global model with it, as DiLoCo and its successors do. Every rank
// holds the same global model, the same summed deltas and so the same outer state: replicas
// stay identical.
//
// Without it a round applies w ← w + γ·ΣΔ/N (ESync's global learning rate γ; 1 for WBSP),
// which is the outer "sgd" at rate γ without momentum.

// The names Config.Outer takes besides the registry's optimizers.
const (
	// OuterNone is no outer optimizer: the strategy's own update.
	OuterNone = "none"
	// OuterNesterov is SGD with Nesterov momentum, DiLoCo's outer optimizer.
	OuterNesterov = "nesterov"
)

// The outer defaults, DiLoCo's: Nesterov momentum 0.9 at rate 0.7. A rate and momentum of
// another outer optimizer are its flags' to give, but "sgd" defaults to rate 1 and no
// momentum, which is the plain average.
const (
	DefaultOuterNesterovLR       = 0.7
	DefaultOuterNesterovMomentum = 0.9
)

// outerRounds is implemented by the strategies an outer optimizer applies to: their rounds
// average local steps. The error refuses a setting of the strategy's own that the outer
// optimizer would contradict.
type outerRounds interface{ outerRounds() error }

// outerName is cfg's outer optimizer, OuterNone when unset.
func (c *Config) outerName() string {
	if c.Outer == "" {
		return OuterNone
	}
	return c.Outer
}

// outerSettings returns the registry's factory and settings of cfg's outer optimizer, with
// the defaults of the rate and momentum filled in (recorded in cfg, so config.json says what
// ran). Weight decay and Adam's betas are the workers' optimizer's settings, not the outer
// one's: the outer optimizer takes its factory's defaults for them.
func outerSettings(opts *optim.Registry, cfg *Config) (optim.Factory, optim.Settings, error) {
	name := cfg.outerName()
	factory := name
	if name == OuterNesterov {
		factory = "sgd"
	}
	f, err := opts.Lookup(factory)
	if err != nil {
		return f, optim.Settings{}, fmt.Errorf("trainer: Config.Outer (--outer) %q: unknown (known: %s, %s, %s)",
			name, OuterNone, OuterNesterov, strings.Join(opts.Names(), ", "))
	}
	if cfg.OuterLR == 0 {
		switch name {
		case OuterNesterov:
			cfg.OuterLR = DefaultOuterNesterovLR
		case "sgd":
			cfg.OuterLR = 1
		default:
			return f, optim.Settings{}, fmt.Errorf("trainer: Config.OuterLR (--outer-lr): required with --outer %s", name)
		}
	}
	if cfg.OuterMomentum == nil && f.UsesSetting(optim.SettingMomentum) {
		m := 0.0
		if name == OuterNesterov {
			m = DefaultOuterNesterovMomentum
		}
		cfg.OuterMomentum = &m
	}
	s := optim.Settings{LR: cfg.OuterLR, Nesterov: name == OuterNesterov,
		Beta1: f.Defaults.Beta1, Beta2: f.Defaults.Beta2, Eps: f.Defaults.Eps}
	if cfg.OuterMomentum != nil {
		if !f.UsesSetting(optim.SettingMomentum) {
			return f, s, fmt.Errorf("trainer: Config.OuterMomentum (--outer-momentum): --outer %s takes no momentum", name)
		}
		s.Momentum = *cfg.OuterMomentum
	}
	return f, s, nil
}

// validateOuter checks cfg's outer optimizer for strat: one that applies to it, known, with
// settings its optimizer accepts; nothing to check when there is none.
func validateOuter(opts *optim.Registry, strat Strategy, cfg *Config) error {
	if cfg.outerName() == OuterNone {
		if cfg.OuterLR != 0 || cfg.OuterMomentum != nil {
			return fmt.Errorf("trainer: --outer-lr and --outer-momentum are the outer optimizer's: give --outer too")
		}
		return nil
	}
	o, ok := strat.(outerRounds)
	if ok {
		if err := o.outerRounds(); err != nil {
			return fmt.Errorf("trainer: Config.Outer (--outer %s): %w", cfg.Outer, err)
		}
	} else {
		return fmt.Errorf("trainer: Config.Outer (--outer %s) applies to the strategies whose rounds average local steps "+
			"(esync, wbsp and wbsp-opt over an allreduce); %s over %s has none", cfg.Outer, cfg.Strategy, cfg.Collective)
	}
	f, s, err := outerSettings(opts, cfg)
	if err != nil {
		return err
	}
	if _, err := f.New(s); err != nil {
		return fmt.Errorf("trainer: Config.Outer (--outer %s): %w", cfg.Outer, err)
	}
	return nil
}

// newOuter builds w's outer optimizer, nil when the run has none.
func (w *Worker) newOuter() (optim.Optimizer, error) {
	if w.Cfg.outerName() == OuterNone {
		return nil, nil
	}
	c := *w.Cfg
	f, s, err := outerSettings(w.optimizers, &c)
	if err != nil {
		return nil, err
	}
	o, err := f.New(s)
	if err != nil {
		return nil, fmt.Errorf("trainer: Config.Outer (--outer %s): %w", w.Cfg.Outer, err)
	}
	return o, nil
}

// roundUpdate applies a round's summed deltas to the global model g: the outer optimizer's
// step on the pseudo-gradient −sum/size, or, without one, g ← g + gamma·sum/size.
func roundUpdate(outer optim.Optimizer, g, sum []float32, gamma float64, size int) {
	if outer == nil {
		esyncUpdate(g, sum, gamma, size)
		return
	}
	outer.Step(g, sum[:len(g)], -1/float32(size))
}

// appendOuterState appends the outer optimizer's state as a trailer of a strategy's
// checkpoint state: its length, then its bytes. Nothing without an outer optimizer, so a
// run without one writes the state it always wrote.
func appendOuterState(b []byte, outer optim.Optimizer) []byte {
	if outer == nil {
		return b
	}
	st := outer.AppendState(nil)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(st)))
	return append(b, st...)
}

// loadOuterState loads the trailer appendOuterState wrote (rest: the bytes after the
// strategy's own state) into outer, for a model of n values.
func loadOuterState(outer optim.Optimizer, rest []byte, n int) error {
	if outer == nil {
		if len(rest) != 0 {
			return fmt.Errorf("%d bytes of an outer optimizer's state, and the run has no --outer", len(rest))
		}
		return nil
	}
	if len(rest) == 0 {
		return fmt.Errorf("no outer optimizer's state, and the run has --outer %s: the checkpoint was written without it", outer.Name())
	}
	if len(rest) < 8 || uint64(len(rest)-8) != binary.LittleEndian.Uint64(rest) {
		return fmt.Errorf("an outer optimizer's state of %d bytes does not hold its own length", len(rest))
	}
	if err := outer.LoadState(rest[8:], n); err != nil {
		return fmt.Errorf("the outer optimizer: %w", err)
	}
	return nil
}
