package trainer

import (
	"context"
)

// wbsp is Worker-Busy Synchronous Parallel (Yang et al., Parallel Computing 2024;
// docs/algorithms.md#wbsp) in its parameter-server form, for --collective ps (every other
// collective runs wbspAllReduce, wbsp_allreduce.go). Workers never wait for each other: every step a worker takes one
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
// is the model rank 0 evaluates. Every step boundary is a round of the worker's own (the
// upload), so a caller's loop drives it as a Session under ExchangeParams: its optimizer
// steps its copy, and each Sync uploads the step's change and applies a newly published
// global model.
type wbsp struct {
	psClient
	prev  []float32 // Params before the step (kept current: no copy per step)
	delta []float32 // the step's change, uploaded
}

func (s *wbsp) Name() string { return "wbsp" }

func wbspFactory() Factory {
	return Factory{
		Options: func() Options { return &WBSPOptions{} },
		New:     wbspNew(func() Strategy { return &wbsp{} }, func() Strategy { return &wbspAllReduce{} }),
	}
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

// Round is one local step and its upload (StepRound).
func (s *wbsp) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: the worker's optimizer steps its own copy; the upload may bring the global model.
func (s *wbsp) Exchange() Exchange { return ExchangeParams }

// localStep is WBSP's own step in the built-in loop (wbspStep): its step time counts the
// update as computation.
func (s *wbsp) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	return wbspStep(ctx, w)
}

// Sync uploads the step's change and, when a newer global model was published, continues
// from it.
func (s *wbsp) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	t0 := w.Now()
	stepDelta(s.delta, w.Params, s.prev)
	s.clock++
	rep, err := s.svc.PushPullIfNewer(ctx, s.delta, w.Params, s.clock, stopVote)
	if err != nil {
		return RoundStats{}, s.stepErr(w, "wbsp", err)
	}
	if rep.Fresh > 0 {
		copy(s.prev, w.Params)
	}
	rs := s.roundOf(rep, w.Now().Sub(t0))
	psProgress(w, &rs, rep)
	return rs, nil
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *wbsp) NoCheckpoint() string {
	return "the global model and the buffered uploads live on the parameter-server ranks, and every worker has its own steps since its last pull"
}
