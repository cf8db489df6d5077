package trainer

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Sync-Switch's settings: its options, their flags, defaults and validation.

// SyncSwitchConfig holds Sync-Switch's settings (docs/algorithms.md#sync-switch).
type SyncSwitchConfig struct {
	// PSPlacement is where the ASP phase's parameter server lives.
	PSPlacement
	// SwitchAt is the fraction of the total work trained with BSP before the one planned
	// switch to ASP (the paper's offline policy picked 5% for ResNet32/CIFAR-10). 0 means 0.05.
	SwitchAt float64 `json:"switch_at,omitempty"`
	// TrainSamples is the size of the training set, used to turn --epochs into BSP rounds
	// when --max-rounds is not given. 0 means 60000 (Fashion-MNIST).
	TrainSamples int `json:"train_samples,omitempty"`
	// ASPLR is the ASP phase's learning rate. 0 means the treatment's own (aspOptimizer):
	// LR/N (the inverse of linear scaling) for keep, ramp and zero, LR for scale and off.
	ASPLR float64 `json:"asp_lr,omitempty"`
	// Momentum is the optimizer state's treatment at BSP→ASP (docs/algorithms.md#the-switch; the choice of default is
	// argued on the syncSwitch type): "scale" (default: the velocity carries over, the
	// coefficient is m/N, the learning rate stays LR), "keep" (velocity and coefficient carry
	// over, LR/N), "ramp" (velocity kept, coefficient m/N rising linearly back to m over
	// RampRounds, LR/N: the paper's best-scoring treatment), "implicit" (velocity kept, the
	// coefficient and LR that keep BSP's total momentum and step per sample once asynchrony's
	// implicit momentum 1 − 1/N is counted), "zero" (velocity restarts at zero, m, LR/N) or
	// "off" (plain SGD at LR, as asgd). "" means scale.
	Momentum string `json:"momentum,omitempty"`
	// Policy reacts to transient stragglers during the BSP phase: "none", "greedy" (switch
	// to ASP at once and stay) or "elastic" (ASP for ElasticRounds, then back to BSP for the
	// rest of the planned BSP work). "" means none.
	Policy string `json:"policy,omitempty"`
	// Threshold (θ) and Window (K) configure the straggler detector; 0 means 1.5 and 5.
	Threshold float64 `json:"threshold,omitempty"`
	Window    int     `json:"window,omitempty"`
	// ElasticRounds is how long an elastic ASP excursion lasts, in global rounds (N pushes
	// each). 0 means 100.
	ElasticRounds int `json:"elastic_rounds,omitempty"`
	// RampRounds is the length of --switch-momentum ramp's ramp, in global rounds (N pushes
	// each). 0 means 100.
	RampRounds int `json:"ramp_rounds,omitempty"`
	// Decay is the learning-rate schedule over the whole run, both phases: "cosine" (each
	// phase's learning rate × ½(1 + cos(π·r/R)) at global round r of the run's R; the paper's
	// T2T schedule runs on the global step, which goes on across its switches;
	// needs --epochs or --max-rounds, constant when only --max-time bounds the run) or "none"
	// (constant, as the other strategies). "" means none.
	Decay string `json:"decay,omitempty"`
}

// SwitchMomentumTreatments are the values of --switch-momentum (SyncSwitchConfig.Momentum).
func SwitchMomentumTreatments() []string {
	return []string{"keep", "scale", "ramp", "implicit", "zero", "off"}
}

// defaults returns s with its zero fields filled.
func (s SyncSwitchConfig) defaults() SyncSwitchConfig {
	if s.SwitchAt == 0 {
		s.SwitchAt = 0.05
	}
	if s.TrainSamples == 0 {
		s.TrainSamples = 60000
	}
	if s.Policy == "" {
		s.Policy = "none"
	}
	if s.Momentum == "" {
		s.Momentum = "scale"
	}
	if s.Threshold == 0 {
		s.Threshold = 1.5
	}
	if s.Window == 0 {
		s.Window = 5
	}
	if s.ElasticRounds == 0 {
		s.ElasticRounds = 100
	}
	if s.RampRounds == 0 {
		s.RampRounds = 100
	}
	if s.Decay == "" {
		s.Decay = "none"
	}
	return s
}

// Flags declares Sync-Switch's flags.
func (s *SyncSwitchConfig) Flags(fs *flag.FlagSet) {
	*s = s.defaults()
	s.PSPlacement.Flags(fs)
	fs.Float64Var(&s.SwitchAt, "switch-at", s.SwitchAt, "fraction of the total work (--max-rounds, --epochs or --max-time) trained with BSP before switching to ASP")
	fs.Float64Var(&s.ASPLR, "switch-asp-lr", s.ASPLR, "learning rate of the ASP phase (default: --lr for scale and off, --lr / ranks for keep, ramp and zero)")
	fs.StringVar(&s.Momentum, "switch-momentum", s.Momentum, "optimizer state at BSP→ASP: scale (velocity carried, momentum ÷ ranks, --lr), keep (velocity and momentum carried, --lr / ranks), ramp (as scale at --lr / ranks, momentum back to --momentum over --switch-ramp-rounds), implicit (velocity carried, momentum and lr that count asynchrony's own momentum), zero (velocity reset) or off (plain SGD at --lr, as asgd)")
	fs.IntVar(&s.RampRounds, "switch-ramp-rounds", s.RampRounds, "--switch-momentum ramp: global rounds over which the momentum returns from momentum ÷ ranks to momentum")
	fs.StringVar(&s.Decay, "switch-lr-decay", s.Decay, "learning-rate schedule over the whole run, both phases: none or cosine (to 0 at the run's last round; needs --epochs or --max-rounds)")
	fs.IntVar(&s.TrainSamples, "switch-train-samples", s.TrainSamples, "training-set size that turns --epochs into BSP rounds")
	fs.StringVar(&s.Policy, "straggler-policy", s.Policy, "reaction to detected stragglers during BSP: none, greedy or elastic")
	fs.Float64Var(&s.Threshold, "straggler-threshold", s.Threshold, "a straggler is detected when --straggler-window rounds in a row each take more than this multiple of the baseline (median) round time")
	fs.IntVar(&s.Window, "straggler-window", s.Window, "consecutive straggling rounds that detect a straggler")
	fs.IntVar(&s.ElasticRounds, "elastic-rounds", s.ElasticRounds, "global rounds of an elastic ASP excursion")
}

// Defaults fills s's zero fields.
func (s *SyncSwitchConfig) Defaults(*Config) { *s = s.defaults() }

// Validate checks the Sync-Switch settings (zero fields are defaults).
func (s *SyncSwitchConfig) Validate(_ *Config, size int) error {
	if err := s.validate(); err != nil {
		return err
	}
	return s.PSPlacement.Validate(size)
}

func (s SyncSwitchConfig) validate() error {
	switch {
	case s.SwitchAt < 0 || s.SwitchAt > 1 || math.IsNaN(s.SwitchAt):
		return fmt.Errorf("trainer: --switch-at must be a fraction in [0, 1], got %v", s.SwitchAt)
	case s.TrainSamples < 0:
		return fmt.Errorf("trainer: --switch-train-samples must be ≥ 0, got %d", s.TrainSamples)
	case s.ASPLR < 0 || math.IsNaN(s.ASPLR) || math.IsInf(s.ASPLR, 0):
		return fmt.Errorf("trainer: --switch-asp-lr must be a positive number, got %v", s.ASPLR)
	case s.Momentum != "" && !slices.Contains(SwitchMomentumTreatments(), s.Momentum):
		return fmt.Errorf("trainer: --switch-momentum %q: want one of %s", s.Momentum, strings.Join(SwitchMomentumTreatments(), ", "))
	case s.Decay != "" && s.Decay != "none" && s.Decay != "cosine":
		return fmt.Errorf("trainer: --switch-lr-decay %q: want none or cosine", s.Decay)
	case s.RampRounds < 0:
		return fmt.Errorf("trainer: --switch-ramp-rounds must be ≥ 1, got %d", s.RampRounds)
	case s.Policy != "" && s.Policy != "none" && s.Policy != "greedy" && s.Policy != "elastic":
		return fmt.Errorf("trainer: --straggler-policy %q: want none, greedy or elastic", s.Policy)
	case s.Threshold < 0 || (s.Threshold > 0 && s.Threshold <= 1) || math.IsNaN(s.Threshold) || math.IsInf(s.Threshold, 0):
		return fmt.Errorf("trainer: --straggler-threshold must be a number > 1, got %v", s.Threshold)
	case s.Window < 0:
		return fmt.Errorf("trainer: --straggler-window must be ≥ 1, got %d", s.Window)
	case s.ElasticRounds < 0:
		return fmt.Errorf("trainer: --elastic-rounds must be ≥ 1, got %d", s.ElasticRounds)
	}
	return nil
}
