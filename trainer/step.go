package trainer

import (
	"context"
	"time"
)

// Exchange is what a stepped strategy's round exchanges, and so where the caller's optimizer
// step falls in its loop.
type Exchange int

const (
	// ExchangeGradients: each local step's gradient is exchanged; Sync leaves the ranks'
	// average in the gradient vector and the caller's optimizer then applies it (ssgd, the
	// form of DDP). Every step ends a round.
	ExchangeGradients Exchange = iota + 1
	// ExchangeParams: the caller's optimizer applies each local step's own gradient, and Sync
	// replaces the parameters with the round's global model (esync, wbsp and wbsp-opt, ssp
	// --ssp-pull lazy, local), or leaves them (local, which trains each rank alone).
	ExchangeParams
	// ExchangeServer: the update is the strategy's, not the caller's: Sync takes the step's
	// gradient from the gradient vector and leaves the updated model in the parameters, and
	// the caller's optimizer does not step (asgd, dcasgd and ssp, whose parameter server
	// applies each push with its own rule; sync-switch, whose optimizer state carries over
	// its switches between BSP and the server's ASP).
	ExchangeServer
)

func (e Exchange) String() string {
	switch e {
	case ExchangeGradients:
		return "gradients"
	case ExchangeParams:
		return "parameters"
	case ExchangeServer:
		return "server"
	}
	return "unknown"
}

// StepReport is what the loop that took a local step says of it.
type StepReport struct {
	Loss    float64 // mean loss over the step's batch
	Samples int     // batch size
	Correct int     // correct predictions (classifiers; 0 otherwise)
	// Duration is how long the step took: batch, forward/backward and, under
	// ExchangeParams, the optimizer's update. ESync's state service predicts the ranks'
	// finishing times from it.
	Duration time.Duration
}

// Stepped is a strategy in step-by-step form: a loop that owns the model and its optimizer
// drives it, asking after each local step whether to synchronize now. Its Round is the
// built-in loop over these methods (return StepRound(ctx, w, s, stopVote)), so Train and a
// Session run the same code.
//
// A round, on every rank: Begin; then local steps, each followed by AfterStep and ShouldSync,
// until ShouldSync says yes; then Sync, which every rank calls once per round.
type Stepped interface {
	Strategy
	// Exchange says what Sync exchanges: the gradient vector, the parameters, or the gradient
	// for the strategy's own update. It may change between rounds; a loop asks before each
	// local step.
	Exchange() Exchange
	// Optimizer is the optimizer the built-in loop steps in a caller's place (under
	// ExchangeGradients, on the averaged gradient after Sync; under ExchangeParams, on each
	// step's gradient; under ExchangeServer, never).
	Optimizer(w *Worker) Optimizer
	// Begin prepares a round before its first local step.
	Begin(ctx context.Context, w *Worker) error
	// AfterStep counts one local step taken on w's vectors.
	AfterStep(w *Worker, r StepReport)
	// ShouldSync says whether this rank's round ends with the steps taken so far.
	ShouldSync(ctx context.Context, w *Worker) (bool, error)
	// Sync runs the round's exchange; stopVote is rank 0's vote, as in Strategy.Round.
	Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error)
}

// paramsAtSteps is implemented by stepped strategies whose ShouldSync reads and may rewrite
// the parameters between rounds (wbsp-opt over an allreduce re-bases the steps not yet sent
// onto a global model that arrived mid-round): a caller that keeps its parameters elsewhere
// copies them into the session's vector before each Step and back after ShouldSync.
type paramsAtSteps interface{ ParamsAtSteps() bool }

// steppable is implemented by stepped strategies whose configuration may still refuse a
// caller's loop (ESync's non-blocking queries): the error says why.
type steppable interface{ Steppable() error }

// StepRound is the built-in loop's round of a stepped strategy, and so a stepped strategy's
// Round (a strategy of a program's own included): the model's local steps, each followed by
// the strategy's optimizer under ExchangeParams, until the strategy says to synchronize; then
// Sync, followed by the optimizer's step on the averaged gradient under ExchangeGradients
// (under ExchangeServer, Sync's update is the strategy's and the optimizer never steps).
func StepRound(ctx context.Context, w *Worker, s Stepped, stopVote bool) (RoundStats, error) {
	if err := s.Begin(ctx, w); err != nil {
		return RoundStats{}, err
	}
	opt := s.Optimizer(w)
	own, hasOwn := s.(ownStep)
	for {
		var (
			r   StepReport
			err error
		)
		if hasOwn {
			r, err = own.localStep(ctx, w)
		} else {
			r, err = builtinStep(ctx, w, s.Exchange(), opt)
		}
		if err != nil {
			return RoundStats{}, err
		}
		s.AfterStep(w, r)
		sync, err := s.ShouldSync(ctx, w)
		if err != nil {
			return RoundStats{}, err
		}
		if sync {
			break
		}
	}
	ex := s.Exchange() // the round's, whatever the next one's is
	st, err := s.Sync(ctx, w, stopVote)
	if err != nil {
		return st, err
	}
	if ex == ExchangeGradients {
		opt.Step(w.Params, w.Grads, 1)
	}
	return st, nil
}

// ownStep is implemented by built-in stepped strategies whose local step in the built-in loop
// is their own (WBSP's step time, which elects its trigger rank, counts the update as
// computation), in place of builtinStep.
type ownStep interface {
	localStep(ctx context.Context, w *Worker) (StepReport, error)
}

// builtinStep is the built-in loop's local step: the model's step, and under ExchangeParams
// the optimizer's update, whose time the step's duration counts and the next step's injected
// sleep leaves room for.
func builtinStep(ctx context.Context, w *Worker, ex Exchange, opt Optimizer) (StepReport, error) {
	t0 := w.Now()
	ls, err := w.LocalStep(ctx)
	if err != nil {
		return StepReport{}, err
	}
	r := StepReport{Loss: ls.Loss, Samples: ls.Samples, Correct: ls.Correct, Duration: ls.Compute}
	if ex == ExchangeParams {
		t1 := w.Now()
		opt.Step(w.Params, w.Grads, 1)
		u := w.Now().Sub(t1)
		w.Inject.After = u
		r.Duration = t1.Sub(t0) + u
	}
	return r, nil
}
