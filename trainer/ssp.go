package trainer

import (
	"context"
	"flag"
	"fmt"

	"github.com/hetsync/hetsync/collective/kv"
)

// ssp is stale synchronous parallel over the parameter server of collective/kv, with bound
// s = --staleness (40, WBSP's SSP baseline). A worker's clock c_i counts its completed steps.
//
//   - --ssp-pull every (textbook, Ho et al. 2013): each step the worker pushes g and pulls w
//     in one request; the server applies w ← w − lr·g at once and holds the reply while
//     c_i − min_j c_j > s, so the worker starts step c_i+1 only within the bound (s = 0 is
//     BSP, a large s is ASGD).
//   - --ssp-pull lazy (the ADSP/WBSP code, mySSP.py): the worker steps on its own copy, pushes
//     the model change Δ every step (the server adds Δ/N at once, never holding a push), and
//     pulls only when the minimum clock of its last reply is s or more behind it; the server
//     holds that pull until the worker is less than s ahead.
//
// The servers' gate never blocks their reader goroutines (a held reply is queued in the
// shard), and rank 0's stop vote releases every held worker with the stop flag, so the end of
// training cannot deadlock. The time a worker spends held counts as Comm. A caller's loop
// drives every as a Session under ExchangeServer (its optimizer never steps; the bound holds
// its Sync) and lazy under ExchangeParams (its optimizer steps its own copy).
type ssp struct {
	psClient
	opts  *SSPOptions
	lazy  bool
	bound uint64
	prev  []float32 // lazy: Params before the step (kept current)
	delta []float32 // lazy: this step's change
}

// SSPOptions are ssp's options.
type SSPOptions struct {
	PSPlacement
	// Staleness is the bound s; nil means DefaultStaleness (WBSP's SSP baseline).
	Staleness *int `json:"staleness,omitempty"`
	// Pull is "every" (textbook: pull every step, block while more than s ahead) or "lazy"
	// (the ADSP code: push Δ every step, pull only when at least s ahead).
	Pull string `json:"ssp_pull,omitempty"`
}

// DefaultStaleness is ssp's s when --staleness is not given.
const DefaultStaleness = 40

// StalenessBound is s.
func (o *SSPOptions) StalenessBound() int {
	if o.Staleness == nil {
		return DefaultStaleness
	}
	return *o.Staleness
}

func (o *SSPOptions) Flags(fs *flag.FlagSet) {
	o.PSPlacement.Flags(fs)
	if o.Staleness == nil {
		s := DefaultStaleness
		o.Staleness = &s
	}
	fs.IntVar(o.Staleness, "staleness", *o.Staleness, "staleness bound s (0 is BSP)")
	fs.StringVar(&o.Pull, "ssp-pull", "every", "every (pull each step, block while more than s ahead) or lazy (the ADSP code: pull only when ≥ s ahead)")
}

func (o *SSPOptions) Defaults(*Config) {
	if o.Pull == "" {
		o.Pull = "every"
	}
}

func (o *SSPOptions) Validate(_ *Config, size int) error {
	switch {
	case o.Staleness != nil && *o.Staleness < 0:
		return fmt.Errorf("trainer: --staleness must be ≥ 0, got %d", *o.Staleness)
	case o.Pull != "" && o.Pull != "every" && o.Pull != "lazy":
		return fmt.Errorf("trainer: --ssp-pull must be every or lazy, got %q", o.Pull)
	case o.Pull == "lazy" && o.StalenessBound() < 1:
		return fmt.Errorf("trainer: --ssp-pull lazy pulls when a worker is ≥ s steps ahead, so it needs --staleness ≥ 1, got %d", o.StalenessBound())
	}
	return o.PSPlacement.Validate(size)
}

func sspFactory() Factory {
	return Factory{
		Options:     func() Options { return &SSPOptions{} },
		Collectives: []string{CollectivePS}, // the server holds the clocks that gate the pulls
		New: func(cfg *Config) (Strategy, error) {
			o, err := optionsOf[*SSPOptions](cfg, "ssp")
			return &ssp{opts: o}, err
		},
	}
}

func (s *ssp) Name() string { return "ssp" }

func (s *ssp) Start(ctx context.Context, w *Worker) error {
	s.lazy = s.opts.Pull == "lazy"
	s.bound = uint64(s.opts.StalenessBound())
	var rule kv.RuleFactory
	gate := &kv.SSPGate{Staleness: s.bound}
	if s.lazy {
		rule = kv.Delta{Scale: 1 / float32(w.Size)}.Factory()
		gate.Staleness = s.bound - 1 // hold while c − min ≥ s (validated: s ≥ 1)
		s.prev = make([]float32, len(w.Params))
		s.delta = make([]float32, len(w.Params))
	} else {
		rule = kv.SGD{LR: float32(w.Cfg.LR)}.Factory()
	}
	svc, err := startPS(ctx, w, "ssp", rule, gate)
	s.svc = svc
	copy(s.prev, w.Params)
	return err
}

// Round is one local step and its exchange with the server (StepRound).
func (s *ssp) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: --ssp-pull every pushes the gradient for the server's update; --ssp-pull lazy
// steps the worker's own copy with its optimizer and exchanges the step's change.
func (s *ssp) Exchange() Exchange {
	if s.opts.Pull == "lazy" {
		return ExchangeParams
	}
	return ExchangeServer
}

// localStep is the built-in loop's step: under --ssp-pull lazy it includes the local SGD
// update, which counts as computation.
func (s *ssp) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	if s.lazy {
		return wbspStep(ctx, w)
	}
	return builtinStep(ctx, w, ExchangeServer, nil)
}

// Sync is the step's exchange: every pushes the gradient and pulls the model (the server
// holds the reply while this rank is more than s steps ahead); lazy pushes the step's change
// and pulls only when at least s steps ahead of the slowest rank.
func (s *ssp) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	if !s.lazy {
		rep, comm, err := s.pushPull(ctx, w, stopVote, "ssp")
		if err != nil {
			return RoundStats{}, err
		}
		rs := s.roundOf(rep, comm)
		psProgress(w, &rs, rep)
		return rs, nil
	}
	s.clock++
	t0 := w.Now()
	stepDelta(s.delta, w.Params, s.prev)
	rep, err := s.svc.Push(ctx, s.delta, s.clock, stopVote)
	if err == nil && !rep.Stop && s.clock >= rep.MinClock+s.bound {
		var prep kv.Reply
		if prep, err = s.svc.Pull(ctx, w.Params, s.clock); err == nil {
			prep.Staleness = rep.Staleness
			rep = prep
			copy(s.prev, w.Params)
		}
	}
	if err != nil {
		return RoundStats{}, s.stepErr(w, "ssp", err)
	}
	rs := s.roundOf(rep, w.Now().Sub(t0))
	psProgress(w, &rs, rep)
	return rs, nil
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *ssp) NoCheckpoint() string {
	return "the model and the workers' clocks live on the parameter-server ranks, and every worker has its own copy and step count"
}
