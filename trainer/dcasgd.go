package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective/kv"
)

// dcasgd is delay-compensated asynchronous SGD (Zheng et al., ICML'17) over the parameter
// server of collective/kv: workers behave as in asgd (compute g at their copy, push g, take
// the current w back), and the server compensates the staleness of g with
//
//	w ← w − lr·(g + λ·g⊙g⊙(w − w_bak(m)))
//
// where w_bak(m) is the model worker m last pulled (--dcasgd-variant paper, the default) or
// MXNet's single previous weight shared by all workers (--dcasgd-variant mxnet, ESync's
// baseline). λ is --dcasgd-lambda (0.04). Momentum and weight decay do not apply on the server.
type dcasgd struct {
	svc   *kv.Service
	clock uint64
}

func (s *dcasgd) Name() string { return "dcasgd" }

func (s *dcasgd) Start(ctx context.Context, w *Worker) error {
	p := w.Cfg.PSSync
	rule := kv.DCASGD{LR: float32(w.Cfg.LR), Lambda: float32(p.DCASGDLambda), Shared: p.DCASGDVariant == "mxnet"}
	svc, err := startPS(ctx, w, "dcasgd", rule.Factory(), nil)
	s.svc = svc
	return err
}

func (s *dcasgd) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st, err := w.LocalStep(ctx)
	if err != nil {
		return RoundStats{}, err
	}
	s.clock++
	t0 := w.Now()
	rep, err := s.svc.PushPull(ctx, w.Grads, w.Params, s.clock, stopVote)
	if err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: dcasgd step %d: %w", w.Rank, s.clock, err)
	}
	t1 := w.Now()
	if err := w.Load(); err != nil {
		return RoundStats{}, err
	}
	rs := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		Compute: st.Compute, Comm: t1.Sub(t0), Staleness: rep.Staleness,
	}
	psProgress(w, &rs, rep)
	return rs, nil
}

func (s *dcasgd) Finish(ctx context.Context, w *Worker) error {
	if s.svc == nil {
		return nil
	}
	return s.svc.Close(ctx)
}
