package trainer

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/collective/kv"
)

// What wbsp and wbsp-opt share (one algorithm, two ways of overlapping the upload): their
// options, the choice between the parameter-server form (--collective ps) and the allreduce
// form (every other collective), the server rule and the worker's local step. Neither
// strategy's file refers to the other's.

// WBSPOptions are the options of wbsp and wbsp-opt (one algorithm, two ways of overlapping).
type WBSPOptions struct {
	PSPlacement
	// Apply is "buffered" (the paper: deltas accumulate and the slowest worker's upload
	// publishes them) or "immediate" (the code: each delta lands at once).
	Apply string `json:"wbsp_apply,omitempty"`
	// SlowRank pins the worker whose upload triggers the global update (the code: rank 1);
	// nil detects the slowest from the upload intervals.
	SlowRank *int `json:"wbsp_slow_rank,omitempty"`
	// Period, when positive, ends every round after this many local steps of each rank in
	// place of the slowest rank's trigger: the rounds' averaging of the ranks' deltas is then
	// local SGD (periodic model averaging). Over an allreduce only: the parameter-server
	// form uploads every step.
	Period int `json:"wbsp_period,omitempty"`
}

func (o *WBSPOptions) Flags(fs *flag.FlagSet) {
	o.PSPlacement.Flags(fs)
	fs.StringVar(&o.Apply, "wbsp-apply", "buffered", "buffered (the paper: publish ΣΔ/N on the slowest worker's upload) or immediate (the code: apply each Δ/N at once)")
	fs.Var(optionalInt{&o.SlowRank}, "wbsp-slow-rank", "the rank whose upload triggers the global update (-1: detect the slowest from upload intervals)")
	fs.IntVar(&o.Period, "wbsp-period", o.Period, "average after every N local steps of each rank (local SGD) instead of the slowest rank's trigger; 0: the trigger")
}

func (o *WBSPOptions) Defaults(*Config) {
	if o.Apply == "" {
		o.Apply = "buffered"
	}
}

func (o *WBSPOptions) Validate(cfg *Config, size int) error {
	if cfg != nil && cfg.Collective != "" && cfg.Collective != CollectivePS {
		// The allreduce form has no server: its apply is the paper's buffered one and it
		// places nothing.
		switch {
		case o.Apply == "immediate":
			return fmt.Errorf("trainer: --wbsp-apply immediate needs --collective ps (the parameter server applies each delta at once); over --collective %s WBSP applies buffered", cfg.Collective)
		case o.PSServers != 0 || len(o.PSRanks) > 0:
			return fmt.Errorf("trainer: --ps-servers and --ps-ranks place the parameter server of --collective ps; WBSP over --collective %s has none", cfg.Collective)
		}
	}
	if cfg != nil && cfg.Collective == CollectivePS && o.Period != 0 {
		return fmt.Errorf("trainer: --wbsp-period %d needs an allreduce (--collective other than ps): WBSP over the parameter server uploads every step", o.Period)
	}
	switch {
	case o.Apply != "" && o.Apply != "buffered" && o.Apply != "immediate":
		return fmt.Errorf("trainer: --wbsp-apply must be buffered or immediate, got %q", o.Apply)
	case o.SlowRank != nil && (*o.SlowRank < 0 || *o.SlowRank >= size):
		return fmt.Errorf("trainer: --wbsp-slow-rank must be a rank in [0, %d), got %d", size, *o.SlowRank)
	case o.Period < 0:
		return fmt.Errorf("trainer: --wbsp-period must be ≥ 0 (0: the slowest rank's trigger), got %d", o.Period)
	case o.Period > 0 && o.SlowRank != nil:
		return fmt.Errorf("trainer: give --wbsp-period (every rank averages after N steps) or --wbsp-slow-rank (that rank's step triggers the round), not both")
	}
	return o.PSPlacement.Validate(size)
}

// wbspNew builds the parameter-server form of a WBSP strategy for --collective ps and its
// allreduce form for every other collective.
func wbspNew(ps, allReduce func() Strategy) func(cfg *Config) (Strategy, error) {
	return func(cfg *Config) (Strategy, error) {
		if cfg.Collective == CollectivePS {
			return ps(), nil
		}
		return allReduce(), nil
	}
}

// wbspRule is the server rule both WBSP strategies use.
func wbspRule(cfg *Config, name string) (kv.RuleFactory, error) {
	o, err := optionsOf[*WBSPOptions](cfg, name)
	if err != nil {
		return nil, err
	}
	r := kv.WBSP{Immediate: o.Apply == "immediate"}
	if o.SlowRank != nil {
		r.PinSlow, r.SlowRank = true, *o.SlowRank
	}
	return r.Factory(), nil
}

// wbspLocalStep is a WBSP worker's step on its own copy: a local step, then the local SGD
// update of w.Params. The update counts as computation (WBSP's step time includes it); end is
// when it finished.
func wbspLocalStep(ctx context.Context, w *Worker) (st StepStats, end time.Time, err error) {
	st, err = w.LocalStep(ctx)
	if err != nil {
		return StepStats{}, time.Time{}, err
	}
	t0 := w.Now()
	w.Apply(w.Grads, 1)
	end = w.Now()
	st.Compute += end.Sub(t0)
	return st, end, nil
}

// wbspStep is wbspLocalStep as a step report: its duration is the step's compute time with
// the injected slowdown and the update, WBSP's step time.
func wbspStep(ctx context.Context, w *Worker) (StepReport, error) {
	ls, _, err := wbspLocalStep(ctx, w)
	return StepReport{Loss: ls.Loss, Samples: ls.Samples, Correct: ls.Correct, Duration: ls.Compute}, err
}
