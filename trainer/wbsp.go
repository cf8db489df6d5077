package trainer

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/collective/kv"
)

// wbsp is Worker-Busy Synchronous Parallel (Yang et al., Parallel Computing 2024;
// docs/algorithms.md#wbsp). Workers never wait for each other: every step a worker takes one
// local SGD step on its own copy and uploads that step's model change Δ = w_after − w_before
// to the parameter server. The global model changes only when the slowest worker uploads:
//
//   - --wbsp-apply buffered (default, the paper): the server accumulates ΣΔ/N and publishes
//     w ← w + acc on the slowest worker's upload, so every pulled model is a trigger-time
//     model.
//   - --wbsp-apply immediate (the code): w ← w + Δ/N on every upload; the slowest worker's
//     upload still marks the new version.
//
// A worker receives the new global model with its next upload after the trigger (one
// request: push, and pull only if newer) and continues from it; the slowest worker receives
// it with its own triggering upload. Every local step is uploaded exactly once, so no update
// is lost or counted twice. The slowest worker is detected by the servers from the workers'
// upload intervals (kv.SlowDetector), or pinned with --wbsp-slow-rank (the code: rank 1).
//
// Between triggers a fast worker's Params is the last global model plus its own steps; that
// is the model rank 0 evaluates.
type wbsp struct {
	psClient
	prev  []float32 // Params before the step (kept current: no copy per step)
	delta []float32 // the step's change, uploaded
}

func (s *wbsp) Name() string { return "wbsp" }

// WBSPOptions are the options of wbsp and wbsp-opt (one algorithm, two ways of overlapping).
type WBSPOptions struct {
	PSPlacement
	// Apply is "buffered" (the paper: deltas accumulate and the slowest worker's upload
	// publishes them) or "immediate" (the code: each delta lands at once).
	Apply string `json:"wbsp_apply,omitempty"`
	// SlowRank pins the worker whose upload triggers the global update (the code: rank 1);
	// nil detects the slowest from the upload intervals.
	SlowRank *int `json:"wbsp_slow_rank,omitempty"`
}

func (o *WBSPOptions) Flags(fs *flag.FlagSet) {
	o.PSPlacement.Flags(fs)
	fs.StringVar(&o.Apply, "wbsp-apply", "buffered", "buffered (the paper: publish ΣΔ/N on the slowest worker's upload) or immediate (the code: apply each Δ/N at once)")
	fs.Var(optionalInt{&o.SlowRank}, "wbsp-slow-rank", "the rank whose upload triggers the global update (-1: detect the slowest from upload intervals)")
}

func (o *WBSPOptions) Defaults(*Config) {
	if o.Apply == "" {
		o.Apply = "buffered"
	}
}

func (o *WBSPOptions) Validate(_ *Config, size int) error {
	switch {
	case o.Apply != "" && o.Apply != "buffered" && o.Apply != "immediate":
		return fmt.Errorf("trainer: --wbsp-apply must be buffered or immediate, got %q", o.Apply)
	case o.SlowRank != nil && (*o.SlowRank < 0 || *o.SlowRank >= size):
		return fmt.Errorf("trainer: --wbsp-slow-rank must be a rank in [0, %d), got %d", size, *o.SlowRank)
	}
	return o.PSPlacement.Validate(size)
}

func wbspFactory() Factory {
	return Factory{
		Options: func() Options { return &WBSPOptions{} },
		New:     func(*Config) (Strategy, error) { return &wbsp{}, nil },
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

func (s *wbsp) Start(ctx context.Context, w *Worker) error {
	s.prev = make([]float32, len(w.Params))
	s.delta = make([]float32, len(w.Params))
	rule, err := wbspRule(w.Cfg, "wbsp")
	if err != nil {
		return err
	}
	svc, err := startPS(ctx, w, "wbsp", rule, nil)
	s.svc = svc
	copy(s.prev, w.Params)
	return err
}

func (s *wbsp) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st, t1, err := wbspLocalStep(ctx, w)
	if err != nil {
		return RoundStats{}, err
	}
	stepDelta(s.delta, w.Params, s.prev)
	s.clock++
	rep, err := s.svc.PushPullIfNewer(ctx, s.delta, w.Params, s.clock, stopVote)
	if err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: wbsp step %d: %w", w.Rank, s.clock, err)
	}
	if rep.Fresh > 0 {
		copy(s.prev, w.Params)
	}
	rs := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		Compute: st.Compute, Comm: w.Now().Sub(t1),
	}
	psProgress(w, &rs, rep)
	return rs, nil
}
