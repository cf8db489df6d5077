package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/trainer/metrics"
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
}

func (s *wbspAllReduce) Name() string { return "wbsp" }

func (s *wbspAllReduce) Start(ctx context.Context, w *Worker) error {
	if err := s.start(w, "wbsp"); err != nil {
		return err
	}
	s.post(ctx, w)
	return nil
}

func (s *wbspAllReduce) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	if err := s.stepsUntilTrigger(ctx, w, "wbsp"); err != nil {
		return RoundStats{}, err
	}
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

// NoCheckpoint says why one file written by rank 0 cannot hold this strategy's state.
func (s *wbspAllReduce) NoCheckpoint() string {
	return "its ranks take different numbers of steps per round, each keeping its own changes since the last round"
}
