package trainer

import (
	"context"
	"flag"
	"fmt"
	"math"

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
	opts *DCASGDOptions
}

// DCASGDOptions are dcasgd's options.
type DCASGDOptions struct {
	PSPlacement
	// Variant is "paper" (per-worker backups) or "mxnet" (one shared previous weight,
	// MXNet's optimizer.DCASGD as ESync ran it).
	Variant string `json:"dcasgd_variant,omitempty"`
	// Lambda is λ of the delay compensation. 0 means DefaultDCASGDLambda (MXNet's default).
	Lambda float64 `json:"dcasgd_lambda,omitempty"`
}

// DefaultDCASGDLambda is MXNet's λ.
const DefaultDCASGDLambda = 0.04

func (o *DCASGDOptions) Flags(fs *flag.FlagSet) {
	o.PSPlacement.Flags(fs)
	fs.StringVar(&o.Variant, "dcasgd-variant", "paper", "paper (per-worker backups) or mxnet (one shared previous weight, ESync's baseline)")
	if o.Lambda == 0 {
		o.Lambda = DefaultDCASGDLambda
	}
	fs.Var(positiveFloat{p: &o.Lambda, hint: "λ 0 is asgd: use --sync asgd"}, "dcasgd-lambda", "λ of the delay compensation")
}

func (o *DCASGDOptions) Defaults(*Config) {
	if o.Variant == "" {
		o.Variant = "paper"
	}
	if o.Lambda == 0 {
		o.Lambda = DefaultDCASGDLambda
	}
}

func (o *DCASGDOptions) Validate(_ *Config, size int) error {
	switch {
	case o.Variant != "" && o.Variant != "paper" && o.Variant != "mxnet":
		return fmt.Errorf("trainer: --dcasgd-variant must be paper or mxnet, got %q", o.Variant)
	case o.Lambda < 0 || math.IsNaN(o.Lambda) || math.IsInf(o.Lambda, 0):
		return fmt.Errorf("trainer: --dcasgd-lambda must be a finite number ≥ 0, got %v", o.Lambda)
	}
	return o.PSPlacement.Validate(size)
}

func dcasgdFactory() Factory {
	return Factory{
		Options:     func() Options { return &DCASGDOptions{} },
		Collectives: []string{CollectivePS}, // the server applies each push: there is no round to allreduce
		New: func(cfg *Config) (Strategy, error) {
			o, err := optionsOf[*DCASGDOptions](cfg, "dcasgd")
			return &dcasgd{opts: o}, err
		},
	}
}

func (s *dcasgd) Name() string { return "dcasgd" }

func (s *dcasgd) Start(ctx context.Context, w *Worker) error {
	rule := kv.DCASGD{LR: float32(w.Cfg.LR), Lambda: float32(s.opts.Lambda), Shared: s.opts.Variant == "mxnet"}
	svc, err := startPS(ctx, w, "dcasgd", rule.Factory(), nil)
	s.svc = svc
	return err
}

// Round is one local step and its push (StepRound).
func (s *dcasgd) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: the server applies the pushed gradient with its delay compensation.
func (s *dcasgd) Exchange() Exchange { return ExchangeServer }

// Sync pushes the step's gradient and pulls the server's model into w.Params.
func (s *dcasgd) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	rep, comm, err := s.pushPull(ctx, w, stopVote, "dcasgd")
	if err != nil {
		return RoundStats{}, err
	}
	rs := s.roundOf(rep, comm)
	psProgress(w, &rs, rep)
	return rs, nil
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *dcasgd) NoCheckpoint() string {
	return "the model and the delay-compensation backups live on the parameter-server ranks, and every worker has its own stale copy and step count"
}
