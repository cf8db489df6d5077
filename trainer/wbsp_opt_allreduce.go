package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
)

// wbspOptAllReduce is wbsp-opt over an allreduce (every --collective but ps;
// docs/algorithms.md#wbsp-over-an-allreduce): wbsp's rounds and trigger, with each round's
// allreduce non-blocking, overlapping the next steps of every rank. Round k, on every rank:
//
//  1. Local steps until round k's trigger fires (wbsp_round.go). Meanwhile round k−1's
//     allreduce completes; at the first step boundary after it, w_t ← w_{t−1} + ΣΔ/N and the
//     local model becomes w_t + pending, pending being the steps taken since round k−1's
//     vector was handed over (so they are rebased, not lost).
//  2. Round k−1's allreduce is waited for if it is still running (the trigger barrier was
//     issued after it, so it has run on every rank; only its completion is waited for).
//  3. pending is handed over as round k's vector and allreduced without waiting; steps from
//     now on count toward round k+1.
//
// Every step is thus in exactly one allreduced vector, and after every completed allreduce the
// global models are bitwise identical; a rank's own model is that plus its pending steps.
// Rank 0's stop vote rides on round k's vector and is agreed when that allreduce completes, in
// round k+1: every rank then allreduces what is still pending (blocking) and stops, so that
// the last models are identical and hold every step.
//
// The trigger of round k+1 is decided from round k−1's step times (round k's are not known
// when its barrier is posted). A round of Run is one handover: Compute is the steps, Wait the
// trigger rank's barrier and the wait for a previous allreduce still running, Comm the
// bookkeeping and the final blocking allreduce.
//
// Under Config.Compress the vectors travel compressed with this rank's error feedback
// (collective.IAllReduceCompressed; compressed_round.go), the extras and step-time slots
// exact. One allreduce is in flight at a time, so one residual serves both buffers.
//
// A caller's loop drives it as a Session under ExchangeParams: its optimizer steps its own
// copy, and ShouldSync, which may re-base that copy (step 1), reads and writes the parameters
// at every step (ParamsAtSteps).
type wbspOptAllReduce struct {
	wbspRounds
	pipe     *deltaPipeline
	reduce   *roundReducer // the rounds' allreduces, Δ compressed as Config.Compress says
	prev     []float32     // the local model at the last step boundary
	inflight *collective.Request
	stop     bool
	applied  RoundStats // what applying the previous round's allreduce gave, this round
}

func (s *wbspOptAllReduce) Name() string { return "wbsp-opt" }

func (s *wbspOptAllReduce) Start(ctx context.Context, w *Worker) error {
	if err := s.start(w, "wbsp-opt"); err != nil {
		return err
	}
	n := len(s.buf)
	reduce, err := newRoundReducer(w.Cfg, len(w.Params), n-len(w.Params))
	if err != nil {
		return err
	}
	s.reduce = reduce
	// The pipeline's buffers are whole round vectors (Δ, then the extras written at the
	// handover); its global model is w_t, which rebase adds the pending steps to.
	s.pipe = &deltaPipeline{pending: s.buf, inflight: make([]float32, n), global: s.base, empty: true}
	s.prev = append(make([]float32, 0, len(w.Params)), w.Params...)
	s.post(ctx, w)
	return nil
}

// received applies a completed allreduce of the vector in s.pipe.inflight at a step boundary.
func (s *wbspOptAllReduce) received(w *Worker, st *RoundStats) {
	s.inflight = nil
	stop, loss := s.apply(w, s.pipe.inflight)
	s.stop = s.stop || stop
	st.GlobalLoss = loss
	n := len(w.Params)
	s.pipe.rebase(w.Params, 0, n)
	copy(s.prev, w.Params)
}

// testInflight applies the previous round's allreduce if it has completed.
func (s *wbspOptAllReduce) testInflight(w *Worker, st *RoundStats) error {
	if s.inflight == nil {
		return nil
	}
	done, err := s.inflight.Test()
	if err != nil {
		return fmt.Errorf("trainer: rank %d: wbsp-opt round %d: allreduce: %w", w.Rank, s.rounds, err)
	}
	if done {
		s.received(w, st)
	}
	return nil
}

// Round is local steps until the trigger fires, then the handover (StepRound).
func (s *wbspOptAllReduce) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: every rank's optimizer applies its own steps, and the rounds average the deltas.
func (s *wbspOptAllReduce) Exchange() Exchange { return ExchangeParams }

// Optimizer is the worker's, each rank keeping its own momentum.
func (s *wbspOptAllReduce) Optimizer(w *Worker) Optimizer { return w.Opt }

// ParamsAtSteps: ShouldSync re-bases the parameters when the previous round's allreduce
// completes between this round's steps.
func (s *wbspOptAllReduce) ParamsAtSteps() bool { return true }

// localStep is WBSP's own step in the built-in loop (wbspStep).
func (s *wbspOptAllReduce) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	return wbspStep(ctx, w)
}

func (s *wbspOptAllReduce) Begin(context.Context, *Worker) error {
	s.applied = RoundStats{GlobalLoss: -1}
	return nil
}

func (s *wbspOptAllReduce) AfterStep(_ *Worker, r StepReport) { s.record(r) }

// ShouldSync tests the trigger, adds the step to the pending deltas and applies the previous
// round's allreduce if it has completed (step 1 above).
func (s *wbspOptAllReduce) ShouldSync(ctx context.Context, w *Worker) (bool, error) {
	fired, err := s.triggered(ctx, w, "wbsp-opt")
	if err != nil {
		return false, err
	}
	s.pipe.addStep(nil, w.Params, s.prev)
	if err := s.testInflight(w, &s.applied); err != nil {
		return false, err
	}
	return fired, nil
}

// Sync waits for the previous round's allreduce if it still runs and hands the pending steps
// over as this round's vector (steps 2 and 3 above), or, once the stop is agreed, allreduces
// them blocking.
func (s *wbspOptAllReduce) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	if s.inflight != nil {
		t0 := w.Now()
		if err := s.inflight.Wait(ctx); err != nil {
			return RoundStats{}, fmt.Errorf("trainer: rank %d: wbsp-opt round %d: allreduce: %w", w.Rank, s.rounds, err)
		}
		s.st.Wait += w.Now().Sub(t0)
		s.received(w, &s.applied)
	}
	t1 := w.Now()
	// Hand the pending steps over: they become round k's vector.
	vec := s.pipe.handoff()
	s.buf = vec
	st := s.fill(w, stopVote)
	if s.stop {
		// Agreed to stop: allreduce what is pending, blocking, so that every step is in the
		// last model and the replicas end identical.
		if err := s.reduce.allReduce(ctx, s.comm, vec); err != nil {
			return RoundStats{}, fmt.Errorf("trainer: rank %d: wbsp-opt final round %d: allreduce: %w", w.Rank, s.rounds, err)
		}
		s.apply(w, vec)
		copy(w.Params, s.base)
		copy(s.prev, w.Params)
		st.Stop = true
	} else {
		req, err := s.reduce.iAllReduce(ctx, s.comm, vec)
		if err != nil {
			return RoundStats{}, fmt.Errorf("trainer: rank %d: wbsp-opt round %d: %w", w.Rank, s.rounds, err)
		}
		s.inflight = req
		s.post(ctx, w)
	}
	st.Comm = w.Now().Sub(t1)
	st.GlobalLoss = s.applied.GlobalLoss
	st.GlobalRounds, st.GlobalSamples = s.rounds, s.samples
	st.Extra = []metrics.Field{{Key: "next_trigger", Value: float64(s.trigger)}}
	return st, nil
}

func (s *wbspOptAllReduce) Finish(context.Context, *Worker) error { return nil }

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *wbspOptAllReduce) NoCheckpoint() string {
	return "its ranks take different numbers of steps per round, and a round's allreduce overlaps the next steps, whose deltas are not yet sent"
}
