package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// Session is one rank of a job whose training loop the caller owns: its model, its batches
// and its optimizer. The loop takes a local step on the flat vectors Params and Grads, reports
// it (Step), asks whether to synchronize now (ShouldSync) and, when told to, runs the round's
// exchange (Sync). The strategy decides: ESync's state service answers ShouldSync, WBSP's
// trigger barrier fires when the slowest rank completes a step, ssgd, local and the
// parameter-server strategies say yes after every step. No call back into the caller is needed, so a loop in
// another language (the Python package, through the C ABI) drives it with two float32
// vectors and four calls.
//
// Where the caller's optimizer steps depends on Exchange, which the loop asks before each
// local step (a strategy may change it between rounds):
//
//	ExchangeGradients (ssgd):   backward → Step → ShouldSync (yes) → Sync → optimizer on Grads
//	ExchangeParams (esync, wbsp, wbsp-opt, ssp lazy, local):
//	                            backward → optimizer on Grads → Step → ShouldSync → Sync if yes
//	ExchangeServer (asgd, dcasgd, ssp, sync-switch):
//	                            backward → Step → ShouldSync (yes) → Sync; no optimizer: Sync
//	                            leaves the strategy's update of Grads in Params
//
// The parameter-server strategies (asgd, dcasgd, ssp, wbsp and wbsp-opt over --collective ps,
// sync-switch in its ASP phase) are asynchronous: every local step is a round of this rank alone (its push), Sync never
// waits for the other ranks' rounds (ssp's staleness bound may hold it), and rank 0's stop
// vote reaches the others in the server's reply to their next push, so the ranks stop after
// different numbers of rounds (as under local, whose ranks learn it from a message). Every
// other strategy's round is one of every rank, whose Sync every rank calls once, and its stop
// comes after the same round everywhere. Under ParamsAtSteps (wbsp-opt over an allreduce) ShouldSync
// also reads and may rewrite Params.
//
// Train drives the same strategy methods (StepRound) with the worker's model and optimizer,
// so a caller's loop whose optimizer and batches are Train's reaches Train's parameters.
//
// Strategies that are not Stepped refuse a session with the reason (NewSession's error);
// Stepped strategies refuse configurations they cannot be driven in (ESync's non-blocking
// queries). A Session is used from one goroutine.
type Session struct {
	l     *loop
	s     Stepped
	round int       // rounds synchronized so far
	began time.Time // the current round's start
	stop  bool      // rank 0's loop asked to stop
	done  bool      // the agreed stop was reached, or a call failed
}

// NewSession starts this rank's part of a job driven by the caller's loop: every rank calls it
// with the same Config (checked as Train checks it), params holding its initial parameters
// (replaced by rank 0's, as Train does) and grads the gradient vector of the same length (nil
// allocates one; Grads returns it). Rank 0's stop vote rides on the rounds: its loop calls
// Stop, or the Config's bound (MaxRounds, MaxTime, Epochs with opts.TrainSize) is reached, and
// every rank's Sync then reports RoundStats.Stop for the same round. opts are Train's; those
// that belong to Train's own loop (Eval, AfterEval, Failed, Progress, Checkpoint) are refused.
func NewSession(ctx context.Context, ep transport.Endpoint, cfg Config, params, grads []float32, opts TrainOptions) (*Session, error) {
	if err := sessionOptions(opts); err != nil {
		return nil, err
	}
	if err := opts.runDirFields("a session", "NewRunSession"); err != nil {
		return nil, err
	}
	w, strat, err := prepare(ep, cfg, callerModel(params), opts)
	if err != nil {
		return nil, err
	}
	if err := sessionInjects(w); err != nil {
		return nil, err
	}
	if grads != nil {
		if len(grads) != len(params) {
			return nil, fmt.Errorf("trainer: rank %d: a session's gradient vector holds %d values for %d parameters", w.Rank, len(grads), len(params))
		}
		w.Grads = grads
	}
	s, ok := strat.(Stepped)
	if !ok {
		why := "it has no step-by-step form (trainer.Stepped)"
		if n, ok := strat.(notStepped); ok {
			why = n.NotStepped()
		}
		return nil, fmt.Errorf("trainer: rank %d: --sync %s cannot be driven by a caller's loop: %s", w.Rank, strat.Name(), why)
	}
	if p, ok := strat.(steppable); ok {
		if err := p.Steppable(); err != nil {
			return nil, err
		}
	}
	l, err := newLoop(w, strat, TrainOptions{TrainSize: opts.TrainSize, AfterRound: opts.AfterRound})
	if err != nil {
		return nil, err
	}
	sess := &Session{l: l, s: s}
	if err := l.start(ctx); err != nil {
		return nil, err
	}
	// As in Run: a strategy that started is finished, whatever stops the job.
	if err := l.resume(ctx); err != nil {
		_ = strat.Finish(ctx, w)
		return nil, err
	}
	if err := sess.begin(ctx); err != nil {
		_ = strat.Finish(ctx, w)
		return nil, err
	}
	return sess, nil
}

// sessionOptions refuses the options of Train's own loop, which a session would not honour.
func sessionOptions(o TrainOptions) error {
	for _, f := range []struct {
		set  bool
		name string
	}{
		{o.Eval != nil, "Eval"}, {o.AfterEval != nil, "AfterEval"}, {o.Failed != nil, "Failed"},
		{o.Progress != nil, "Progress"}, {o.Checkpoint.enabled(), "Checkpoint"},
	} {
		if f.set {
			return fmt.Errorf("trainer: TrainOptions.%s belongs to Train's loop; a session's caller evaluates, reports and checkpoints in its own", f.name)
		}
	}
	return nil
}

// sessionInjects refuses the heterogeneity a session cannot inject: compute-mode
// stragglers delay Train's batch fetches, which a caller's loop does not make. Slowdown, step
// sleep and SlowdownBase apply to the caller's steps as to Train's (Step sleeps), and
// network-mode stragglers slow the endpoint.
func sessionInjects(w *Worker) error {
	if cfg := w.Cfg; cfg.Stragglers.Mode == "compute" && len(cfg.Stragglers.Windows(w.Rank)) > 0 {
		return fmt.Errorf("trainer: rank %d: Config.Stragglers (compute mode) delays Train's batch fetches; a session's batches are its caller's: use network mode or leave it unset", w.Rank)
	}
	return nil
}

// notStepped is implemented by strategies without a step-by-step form: NotStepped says why.
type notStepped interface{ NotStepped() string }

// callerModel is a session's Model: the caller's parameter vector. Its steps are the
// caller's, never the trainer's.
type callerModel []float32

func (m callerModel) Params() []float32 { return m }

func (m callerModel) Step(context.Context, []float32) (StepResult, error) {
	return StepResult{}, fmt.Errorf("a session's local steps are its caller's")
}

// Params is the parameter vector the caller's optimizer writes and Sync may replace.
func (s *Session) Params() []float32 { return s.l.w.Params }

// Grads is the gradient vector of the caller's local steps; under ExchangeGradients Sync
// replaces it with the ranks' average.
func (s *Session) Grads() []float32 { return s.l.w.Grads }

// Exchange says what Sync exchanges, and so where the caller's optimizer steps.
func (s *Session) Exchange() Exchange { return s.s.Exchange() }

// ParamsAtSteps says whether ShouldSync reads and may rewrite Params between rounds (wbsp-opt
// over an allreduce re-bases the steps not yet sent onto a global model that arrived
// mid-round): a loop that keeps its parameters elsewhere then copies them into Params before
// Step and back after ShouldSync; otherwise only Sync touches them.
func (s *Session) ParamsAtSteps() bool {
	p, ok := s.s.(paramsAtSteps)
	return ok && p.ParamsAtSteps()
}

// Rank and Size are this rank's and the job's.
func (s *Session) Rank() int { return s.l.w.Rank }
func (s *Session) Size() int { return s.l.w.Size }

// Step reports a local step the caller took on Params and Grads. A rank given a slowdown or a
// step sleep (Config.Slowdown, StepSleep, SlowdownBase) sleeps here what Train would after
// its own step, and the sleep counts in the step's duration, as a slower device's time.
func (s *Session) Step(ctx context.Context, r StepReport) error {
	if err := s.usable(); err != nil {
		return err
	}
	w := s.l.w
	if extra := w.Inject.Extra(r.Duration); extra > 0 {
		if err := w.Inject.Sleep(ctx, extra); err != nil {
			return err
		}
		r.Duration += extra
	}
	s.s.AfterStep(w, r)
	return nil
}

// ShouldSync says whether this rank's round ends with the steps reported so far.
func (s *Session) ShouldSync(ctx context.Context) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	ok, err := s.s.ShouldSync(ctx, s.l.w)
	if err != nil {
		s.done = true
	}
	return ok, err
}

// Stop is rank 0's vote to stop after the next Sync; on the other ranks it does nothing (only
// rank 0's vote stops a job).
func (s *Session) Stop() { s.stop = s.l.w.Rank == 0 }

// Sync runs the round's exchange and returns what the round did on this rank; its Stop is the
// agreed stop, after which the caller's loop ends and calls Close.
func (s *Session) Sync(ctx context.Context) (RoundStats, error) {
	if err := s.usable(); err != nil {
		return RoundStats{}, err
	}
	vote := s.l.vote() || s.stop
	st, err := s.s.Sync(ctx, s.l.w, vote)
	if err != nil {
		s.done = true
		return st, err
	}
	s.l.res.Elapsed = s.l.record(s.round, st, s.began)
	if s.l.opts.AfterRound != nil {
		s.l.opts.AfterRound(&s.l.res.Records[len(s.l.res.Records)-1])
	}
	s.round++
	if st.Stop {
		s.done = true
		return st, nil
	}
	if err := s.begin(ctx); err != nil {
		s.done = true
		return st, err
	}
	return st, nil
}

// begin starts a round.
func (s *Session) begin(ctx context.Context) error {
	s.began = time.Now()
	return s.s.Begin(ctx, s.l.w)
}

func (s *Session) usable() error {
	if s.done {
		return fmt.Errorf("trainer: rank %d: the session ended after round %d (its agreed stop or a failed call): close it", s.l.w.Rank, s.round)
	}
	return nil
}

// Close tears the strategy down (it returns when no other rank still needs this one) and
// returns this rank's rounds: their records, the training time and what they ran over.
func (s *Session) Close(ctx context.Context) (*Result, error) {
	if s.l.finished {
		return s.l.res, nil
	}
	s.done = true
	if err := s.l.finish(ctx); err != nil {
		return nil, err
	}
	return s.l.res, nil
}
