package trainer

import (
	"context"
	"encoding/binary"
	"fmt"
)

// ssgd is synchronous SGD (BSP): every round each rank takes one local step, the gradients
// are allreduced (sum) with the chosen collective algorithm and every rank applies the same
// averaged gradient, so the replicas stay bitwise identical.
//
// The allreduced vector is the gradient followed by four extra elements: rank 0's stop vote,
// the rank's training loss, its correct count and its sample count. One collective thus carries the update, the
// agreed stop decision and the global training loss. A barrier before the allreduce separates
// the time spent waiting for slower ranks (Wait) from moving data (Comm).
type ssgd struct {
	buf     []float32
	reduce  *roundReducer // the allreduce of buf: the gradient compressed as Config.Compress says
	step    StepReport    // the round's one local step
	rounds  int
	samples int64
}

const ssgdExtra = 4 // stop vote, loss, correct, samples

func ssgdFactory() Factory {
	return Factory{Options: noOptions, New: func(cfg *Config) (Strategy, error) {
		if compressesRounds(cfg) {
			return &ssgdFeedback{&ssgd{}}, nil
		}
		return &ssgd{}, nil
	}, Compresses: true}
}

func (s *ssgd) Name() string { return "ssgd" }

func (s *ssgd) Start(ctx context.Context, w *Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("trainer: rank %d: ssgd needs a communicator", w.Rank)
	}
	s.buf = make([]float32, len(w.Grads)+ssgdExtra)
	var err error
	s.reduce, err = newRoundReducer(w.Cfg, len(w.Grads), ssgdExtra)
	return err
}

// Round is one local step, the gradients' allreduce and the worker's optimizer step on the
// average (StepRound).
func (s *ssgd) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: ssgd allreduces each step's gradient.
func (s *ssgd) Exchange() Exchange { return ExchangeGradients }

// Optimizer is the worker's: the one every rank applies the same average with.
func (s *ssgd) Optimizer(w *Worker) Optimizer { return w.Opt }

func (s *ssgd) Begin(context.Context, *Worker) error { return nil }

func (s *ssgd) AfterStep(_ *Worker, r StepReport) { s.step = r }

// ShouldSync: every step ends a round.
func (s *ssgd) ShouldSync(context.Context, *Worker) (bool, error) { return true, nil }

// Sync allreduces the step's gradient with the extras and leaves the average in w.Grads.
func (s *ssgd) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st := s.step
	n := len(w.Grads)
	copy(s.buf, w.Grads)
	putRoundExtras(s.buf[n:], stopVote, RoundStats{Loss: st.Loss, Correct: st.Correct, Samples: st.Samples})

	t0 := w.Now()
	if err := w.Comm.Barrier(ctx); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: ssgd round %d: barrier: %w", w.Rank, s.rounds, err)
	}
	t1 := w.Now()
	if err := s.reduce.allReduce(ctx, w.Comm, s.buf); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: ssgd round %d: allreduce: %w", w.Rank, s.rounds, err)
	}
	t2 := w.Now()
	inv := 1 / float32(w.Size)
	for i, g := range s.buf[:n] {
		w.Grads[i] = inv * g
	}
	s.rounds++
	s.samples += int64(s.buf[n+3] + 0.5)
	return RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct,
		GlobalLoss:    float64(s.buf[n+1]) / float64(w.Size),
		GlobalSamples: s.samples,
		GlobalRounds:  s.rounds,
		Compute:       st.Duration,
		Wait:          t1.Sub(t0),
		Comm:          t2.Sub(t1),
		Stop:          s.buf[n] > 0.5,
	}, nil
}

func (s *ssgd) Finish(context.Context, *Worker) error { return nil }

// CheckpointState is the rounds and samples counted so far; the model, its momentum and the
// data position, identical on every rank after a round, are the checkpoint's own.
func (s *ssgd) CheckpointState(*Worker) ([]byte, error) {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.rounds))
	return binary.LittleEndian.AppendUint64(b, uint64(s.samples)), nil
}

// ssgdStateLen is the length of CheckpointState's bytes: the rounds and the samples.
const ssgdStateLen = 16

func (s *ssgd) RestoreState(w *Worker, state []byte, _ *CheckpointHeader) error {
	if len(state) != ssgdStateLen {
		return fmt.Errorf("ssgd state of %d bytes, want %d", len(state), ssgdStateLen)
	}
	s.rounds = int(binary.LittleEndian.Uint64(state))
	s.samples = int64(binary.LittleEndian.Uint64(state[8:]))
	if s.rounds < 0 || s.samples < 0 {
		return fmt.Errorf("ssgd state holds %d rounds and %d samples", s.rounds, s.samples)
	}
	return nil
}

// Resizable: every rank holds the whole model and momentum, and the averaged gradient does
// not depend on the number of ranks, so a job continues on fewer (or more) ranks; each rank's
// data position is then its step count in its new shard.
func (s *ssgd) Resizable() bool { return true }
