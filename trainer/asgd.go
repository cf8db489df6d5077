package trainer

import (
	"context"

	"github.com/hetsync/hetsync/collective/kv"
)

// asgd is textbook asynchronous SGD over the parameter server of collective/kv: each round a
// worker computes g at its copy of the model, pushes g, and the server applies
// w ← w − lr·g on arrival and returns the current w, which becomes the worker's copy. The
// staleness of a push is the number of server updates between the worker's pull and it.
// Momentum and weight decay do not apply (the server rule is plain SGD, as in ESync's ASGD).
//
// Shards live on the ranks ASGDOptions names (default rank 0 alone), as goroutines beside their
// workers. Rank 0's stop vote rides on its push; the server's sticky stop flag reaches every
// worker in its next reply. A caller's loop drives it as a Session under ExchangeServer: its
// gradient is pushed and the server's model pulled into its parameters, its optimizer never
// steps.
type asgd struct {
	psClient
}

// ASGDOptions are asgd's options: where its parameter server lives.
type ASGDOptions struct {
	PSPlacement
}

func (o *ASGDOptions) Defaults(*Config) {}

func (o *ASGDOptions) Validate(_ *Config, size int) error { return o.PSPlacement.Validate(size) }

func asgdFactory() Factory {
	return Factory{
		Options:     func() Options { return &ASGDOptions{} },
		Collectives: []string{CollectivePS}, // the server applies each push: there is no round to allreduce
		New:         func(*Config) (Strategy, error) { return &asgd{}, nil },
	}
}

func (s *asgd) Name() string { return "asgd" }

func (s *asgd) Start(ctx context.Context, w *Worker) error {
	svc, err := startPS(ctx, w, "asgd", kv.SGD{LR: float32(w.Cfg.LR)}.Factory(), nil)
	s.svc = svc
	return err
}

// Round is one local step and its push (StepRound).
func (s *asgd) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: the server applies the pushed gradient; the worker's copy is the server's model.
func (s *asgd) Exchange() Exchange { return ExchangeServer }

// Sync pushes the step's gradient and pulls the server's model into w.Params.
func (s *asgd) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	rep, comm, err := s.pushPull(ctx, w, stopVote, "asgd")
	if err != nil {
		return RoundStats{}, err
	}
	rs := s.roundOf(rep, comm)
	rs.GlobalSamples = int64(rep.Version) * int64(w.Cfg.Batch) // every push is one batch (a partial last batch counts whole)
	rs.GlobalRounds = int(rep.Version) / w.Size
	rs.Stop = rep.Stop
	return rs, nil
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *asgd) NoCheckpoint() string {
	return "the model lives on the parameter-server ranks, which update it on each push, and every worker has its own stale copy and step count"
}
