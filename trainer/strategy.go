package trainer

import (
	"context"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
)

// Strategy is a synchronization strategy: how the ranks' local steps become one model. The
// common loop (Run) calls Start once, then Round until a round reports Stop, then Finish;
// it owns stopping, metrics and evaluation, so a strategy only says what one round does.
//
// Strategies keep their decisions pure where they can (ESync's READY predicate, WBSP's
// trigger, Sync-Switch's detector are functions of their inputs) and leave I/O to Round.
type Strategy interface {
	// Name is the registered name.
	Name() string
	// Start prepares the strategy on this rank (services, buffers); every rank calls it.
	Start(ctx context.Context, w *Worker) error
	// Round runs one round on this rank. stopVote is rank 0's vote (false elsewhere); the
	// strategy carries it to every rank and sets RoundStats.Stop on all ranks for the same
	// agreed round (see the package's stopping rules in stop.go). After Round, w.Params holds
	// the model this rank would evaluate, unless the strategy keeps a global model beside it
	// (globalModel in run.go), which evaluation then takes.
	Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error)
	// Finish tears the strategy down after the last round; every rank calls it, and it
	// returns only when no other rank still needs this one.
	Finish(ctx context.Context, w *Worker) error
}

// RoundStats is what one round did on this rank.
type RoundStats struct {
	LocalSteps int
	Samples    int     // samples this rank trained on
	Loss       float64 // mean training loss of this rank's steps
	Correct    int     // correct predictions on those samples
	// GlobalLoss is the mean training loss over all ranks when the strategy computes it
	// (synchronous strategies); negative otherwise.
	GlobalLoss float64
	// GlobalSamples and GlobalRounds are the job's progress after this round as this rank
	// knows it: samples trained by all ranks, and rounds (for asynchronous strategies,
	// server updates divided by the number of ranks).
	GlobalSamples int64
	GlobalRounds  int
	Compute       time.Duration // local steps including injected slowdown
	Comm          time.Duration // moving data
	Wait          time.Duration // blocked on other ranks (barriers)
	Staleness     uint64        // asynchronous strategies: server updates between pull and push
	Stop          bool          // all ranks agreed to stop after this round
	// Extra are strategy-specific values for this round's metrics record (keys [a-z0-9_]+,
	// distinct from the record's own keys).
	Extra []metrics.Field
}

// asynchronous is implemented by strategies whose round, at the moment, is one push of one
// rank rather than a step of every rank (the parameter-server strategies, Sync-Switch's ASP
// phase): rank 0's coming round then advances the job by one update, not by a global round,
// and Run's stop look-ahead counts it so.
type asynchronous interface{ Asynchronous() bool }

// ranOver is implemented by strategies whose rounds do not run over the worker's communicator
// alone (the parameter-server strategies, local, Sync-Switch): RanOver says what they ran
// over, for the run's summary. Every other strategy's rounds are its communicator's allreduces.
type ranOver interface{ RanOver(w *Worker) string }

// ParameterServer is what Result.Collective says of rounds that ran over the parameter server.
const ParameterServer = "ps (parameter server)"

// collectiveUsed is what strat's rounds ran over on w: its own word, or allReduceUsed.
func collectiveUsed(w *Worker, strat Strategy) string {
	if r, ok := strat.(ranOver); ok {
		return r.RanOver(w)
	}
	return allReduceUsed(w)
}

// allReduceUsed is the allreduce w's communicator runs for a vector of the model's length
// (for auto, what auto chose), or Config.Collective when the communicator cannot say.
func allReduceUsed(w *Worker) string {
	c, ok := w.Comm.(interface {
		AllReduceChoice(n int, dt collective.DType) (collective.Choice, error)
	})
	if !ok {
		return w.Cfg.Collective
	}
	ch, err := c.AllReduceChoice(len(w.Params), collective.Float32)
	if err != nil {
		return w.Cfg.Collective
	}
	return ch.Algorithm
}
