package trainer

import (
	"context"

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
	psClient
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
	st, rep, comm, err := s.pushPullStep(ctx, w, stopVote, "dcasgd")
	if err != nil {
		return RoundStats{}, err
	}
	rs := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		Compute: st.Compute, Comm: comm, Staleness: rep.Staleness,
	}
	psProgress(w, &rs, rep)
	return rs, nil
}
