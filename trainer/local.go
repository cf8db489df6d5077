package trainer

import (
	"context"
	"fmt"
	"sync/atomic"
)

// local trains every rank alone, with no communication: the baseline every strategy is
// measured against. Rank 0's model is the one evaluated. Rank 0's stop vote reaches the other
// ranks as a control message that a watcher goroutine turns into a flag. A caller's loop
// drives it as a Session under ExchangeParams: its optimizer steps its model, and each
// step's Sync only learns the stop (on ranks other than 0, a few steps after rank 0's).
type local struct {
	stop    atomic.Bool
	watcher chan error
	sent    bool
	rounds  int
	samples int64
	step    StepReport // the round's one local step
}

func localFactory() Factory {
	return Factory{Options: noOptions, New: func(*Config) (Strategy, error) { return &local{}, nil }}
}

func (s *local) Name() string { return "local" }

// RanOver says that local's rounds communicate nothing.
func (s *local) RanOver(*Worker) string { return "none" }

func (s *local) Start(ctx context.Context, w *Worker) error {
	if w.Rank == 0 {
		return nil
	}
	s.watcher = make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := controlRecv(ctx, w.Endpoint, 0, ctrlStop, b[:])
		if err == nil {
			s.stop.Store(true)
		}
		s.watcher <- err
	}()
	return nil
}

// Round is one local step and its update (StepRound).
func (s *local) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: every rank's optimizer steps its own model, which Sync leaves as it is.
func (s *local) Exchange() Exchange { return ExchangeParams }

// Optimizer is the worker's.
func (s *local) Optimizer(w *Worker) Optimizer { return w.Opt }

// localStep is the model's step and its update; the step's time is the model's alone.
func (s *local) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	st, err := w.LocalStep(ctx)
	if err != nil {
		return StepReport{}, err
	}
	w.Apply(w.Grads, 1)
	return StepReport{Loss: st.Loss, Samples: st.Samples, Correct: st.Correct, Duration: st.Compute}, nil
}

func (s *local) Begin(context.Context, *Worker) error { return nil }

func (s *local) AfterStep(_ *Worker, r StepReport) { s.step = r }

// ShouldSync: every step ends a round, whose Sync only carries the stop.
func (s *local) ShouldSync(context.Context, *Worker) (bool, error) { return true, nil }

// Sync exchanges nothing: rank 0 sends its stop vote to the others, which learn it from
// their watcher.
func (s *local) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st := s.step
	s.rounds++
	s.samples += int64(st.Samples) * int64(w.Size)
	rs := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		// Only rank 0's progress is known here; the job's is estimated as if all ranks kept pace.
		GlobalSamples: s.samples,
		GlobalRounds:  s.rounds,
		Compute:       st.Duration,
	}
	if w.Rank == 0 {
		if stopVote {
			if err := s.broadcastStop(ctx, w); err != nil {
				return rs, err
			}
			rs.Stop = true
		}
		return rs, nil
	}
	rs.Stop = s.stop.Load()
	return rs, nil
}

func (s *local) broadcastStop(ctx context.Context, w *Worker) error {
	if s.sent {
		return nil
	}
	s.sent = true
	for r := 1; r < w.Size; r++ {
		if err := controlSend(ctx, w.Endpoint, r, ctrlStop, []byte{1}); err != nil {
			return fmt.Errorf("trainer: rank 0: sending the stop vote to rank %d: %w", r, err)
		}
	}
	return nil
}

func (s *local) Finish(ctx context.Context, w *Worker) error {
	if w.Rank == 0 {
		// Rank 0 may end on an error before voting; the others must still learn to stop.
		return s.broadcastStop(ctx, w)
	}
	select {
	case err := <-s.watcher:
		if err != nil {
			return fmt.Errorf("trainer: rank %d: waiting for rank 0's stop vote: %w", w.Rank, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *local) NoCheckpoint() string {
	return "every rank trains a model of its own and runs its rounds apart from the others, which learn rank 0's stop at different rounds, so the ranks share no round to checkpoint at"
}
