package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
)

// wbspAllReduce is wbsp over an allreduce (every --collective but ps;
// docs/algorithms.md#wbsp-over-an-allreduce), with the paper's buffered apply. Every rank
// takes local SGD steps on its own copy, w_t plus its own steps, without waiting for anyone.
// The trigger rank (the slowest, see wbspNextTrigger) completing a step starts a round: every
// rank, at the end of its current step, allreduces Δ_i = w_local − w_t, the sum of its steps'
// changes since the last round, and sets w_{t+1} = w_t + ΣΔ/N. Since w_t and ΣΔ are the same on
// every rank, so is w_{t+1}, bitwise; every step is in exactly one Δ.
//
// The fast ranks learn of the trigger from a non-blocking barrier they Test between steps
// (wbsp_round.go), never by asking the slow rank. The allreduce itself is blocking: every rank
// waits for it, as the PS form's workers wait for their uploads (wbsp-opt overlaps it).
//
// A round of Run is one global round: LocalSteps is this rank's steps in it; Compute the steps,
// Wait the trigger rank's wait for the barrier, Comm the allreduce.
type wbspAllReduce struct {
	wbspRounds
	// unposted: the first round's barrier is posted by Round, not Start, so that a resumed
	// job posts it for the trigger rank its checkpoint names.
	unposted bool
}

func (s *wbspAllReduce) Name() string { return "wbsp" }

func (s *wbspAllReduce) Start(ctx context.Context, w *Worker) error {
	if err := s.start(w, "wbsp"); err != nil {
		return err
	}
	s.unposted = true
	return nil
}

// Round is local steps until the trigger fires, then the deltas' allreduce (StepRound).
func (s *wbspAllReduce) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: every rank's optimizer applies its own steps, and the round averages the deltas.
func (s *wbspAllReduce) Exchange() Exchange { return ExchangeParams }

// Optimizer is the worker's, each rank keeping its own momentum.
func (s *wbspAllReduce) Optimizer(w *Worker) Optimizer { return w.Opt }

// localStep is WBSP's own step in the built-in loop (wbspStep): its step time, which elects
// the trigger rank, counts the update as computation.
func (s *wbspAllReduce) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	return wbspStep(ctx, w)
}

// Begin posts the first round's trigger barrier; every later round's is posted by the Sync
// before it.
func (s *wbspAllReduce) Begin(ctx context.Context, w *Worker) error {
	if s.unposted {
		s.post(ctx, w)
		s.unposted = false
	}
	return nil
}

func (s *wbspAllReduce) AfterStep(_ *Worker, r StepReport) { s.record(r) }

// ShouldSync tests the trigger barrier (the trigger rank completes it, and may wait for it).
func (s *wbspAllReduce) ShouldSync(ctx context.Context, w *Worker) (bool, error) {
	return s.triggered(ctx, w, "wbsp")
}

// Sync allreduces the round's deltas with the extras, sets w_{t+1} and posts the next
// round's trigger barrier.
func (s *wbspAllReduce) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	n := len(w.Params)
	for i, p := range w.Params {
		s.buf[i] = p - s.base[i]
	}
	st := s.fill(w, stopVote)
	t0 := w.Now()
	if err := s.comm.AllReduce(ctx, collective.F32(s.buf), collective.Sum); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: wbsp round %d: allreduce: %w", w.Rank, s.rounds, err)
	}
	st.Stop, st.GlobalLoss = s.apply(w, s.buf)
	copy(w.Params[:n], s.base)
	if !st.Stop {
		s.post(ctx, w)
	}
	st.Comm = w.Now().Sub(t0)
	st.GlobalRounds, st.GlobalSamples = s.rounds, s.samples
	st.Extra = []metrics.Field{{Key: "next_trigger", Value: float64(s.trigger)}}
	return st, nil
}

func (s *wbspAllReduce) Finish(context.Context, *Worker) error { return nil }

// CheckpointState is this rank's part after a round: the rounds and samples counted, the
// next trigger rank and the ranks' step times (agreed, so the same in every part). The model w_t, which every rank has
// just set, its momentum and its data position are the checkpoint's own.
func (s *wbspAllReduce) CheckpointState(*Worker) ([]byte, error) { return s.checkpointState(), nil }

// RestoreState loads CheckpointState's bytes after Start and before the first round posts its
// trigger barrier, so the resumed job's first round has the trigger the killed job's next
// round would have had.
func (s *wbspAllReduce) RestoreState(w *Worker, state []byte, _ *CheckpointHeader) error {
	return s.restoreState(w, state)
}

// Resizable is false: each rank's part holds its own momentum and its position in its own
// shard, and the step times are one per rank.
func (s *wbspAllReduce) Resizable() bool { return false }

// PerRankCheckpoint: the ranks differ in momentum and data position and end every round
// together at the allreduce.
func (s *wbspAllReduce) PerRankCheckpoint() {}
