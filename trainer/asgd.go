package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective/kv"
)

// asgd is textbook asynchronous SGD over the parameter server of collective/kv: each round a
// worker computes g at its copy of the model, pushes g, and the server applies
// w ← w − lr·g on arrival and returns the current w, which becomes the worker's copy. The
// staleness of a push is the number of server updates between the worker's pull and it.
// Momentum and weight decay do not apply (the server rule is plain SGD, as in ESync's ASGD).
//
// Shards live on ranks 0..PSServers-1 (default rank 0 alone), as goroutines beside their
// workers. Rank 0's stop vote rides on its push; the server's sticky stop flag reaches every
// worker in its next reply.
type asgd struct {
	svc   *kv.Service
	clock uint64
}

func (s *asgd) Name() string { return "asgd" }

func (s *asgd) Start(ctx context.Context, w *Worker) error {
	servers := make([]int, max(1, w.Cfg.PSServers))
	for i := range servers {
		servers[i] = i
	}
	svc, err := kv.Start(ctx, w.Endpoint, kv.Config{
		Len:     len(w.Params),
		Servers: servers,
		Init:    w.Params,
		Rule:    kv.SGD{LR: float32(w.Cfg.LR)}.Factory(),
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d: starting the parameter server: %w", w.Rank, err)
	}
	s.svc = svc
	if _, err := svc.Pull(ctx, w.Params, 0); err != nil {
		return fmt.Errorf("trainer: rank %d: first pull: %w", w.Rank, err)
	}
	return w.Load()
}

func (s *asgd) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st, err := w.LocalStep(ctx)
	if err != nil {
		return RoundStats{}, err
	}
	s.clock++
	t0 := w.Now()
	rep, err := s.svc.PushPull(ctx, w.Grads, w.Params, s.clock, stopVote)
	if err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: asgd step %d: %w", w.Rank, s.clock, err)
	}
	t1 := w.Now()
	if err := w.Load(); err != nil {
		return RoundStats{}, err
	}
	return RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		GlobalSamples: int64(rep.Version) * int64(w.Cfg.Batch), // every push is one batch (a partial last batch counts whole)
		GlobalRounds:  int(rep.Version) / w.Size,
		Compute:       st.Compute,
		Comm:          t1.Sub(t0),
		Staleness:     rep.Staleness,
		Stop:          rep.Stop,
	}, nil
}

func (s *asgd) Finish(ctx context.Context, w *Worker) error {
	if s.svc == nil {
		return nil
	}
	return s.svc.Close(ctx)
}
