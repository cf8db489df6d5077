package trainer

import (
	"context"
	"fmt"
	"io"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// TrainOptions are one rank's settings of Train beyond the job's Config.
type TrainOptions struct {
	// Strategies are the strategies cfg.Strategy may name; nil means Builtin.
	Strategies *Registry
	// Eval evaluates a snapshot of the parameters on rank 0 (on a goroutine of its own, so
	// it must not share the model's device or buffers); nil disables evaluation, and with it
	// Config.TargetAcc.
	Eval EvalFunc
	// TrainSize is the number of training samples of the whole job, for Config.Epochs; 0
	// requires a bound other than epochs.
	TrainSize int
	// Comm is the communicator of the synchronous strategies; nil builds one over ep with
	// Config.Collective, planned from Links. A given Comm runs its own algorithm, which Train
	// cannot change: Config.Collective must then be empty or name that algorithm (its
	// Algorithm method), unless the strategy's rounds run over its own parameter server.
	Comm Collective
	// Links is the job's link matrix, the same on every rank, that the communicator Train
	// builds plans from (auto, ring order, ps placement, hier-); nil plans without one.
	Links *topology.Matrix
	// Progress receives rank 0's progress lines; nil prints nothing.
	Progress io.Writer
	// Watch is what the communicator Train builds reports (stalls, timeline); its Timeline
	// also gets a span per local step and per round.
	Watch collective.Watch
	// Checkpoint is where rank 0 writes checkpoints and what the run resumes from.
	Checkpoint CheckpointOptions
	// AfterRound, when set, sees each of this rank's round records as the round ends, and
	// AfterEval each of rank 0's evaluations as it is taken (RunOptions).
	AfterRound func(*metrics.RoundRecord)
	AfterEval  func(EvalResult)
	// Failed, when set, is asked on rank 0 before each round: an error stops the job after
	// that round (RunOptions).
	Failed func() error
}

// Train runs this rank of a training job on the user's model: every rank of the job calls it
// with the same Config (Run checks it at the start: see Config) and its own model, whose
// initial parameters Run replaces with rank 0's, as DDP and Horovod do, so that a model
// initialised differently on every rank still trains one model. The strategy cfg.Strategy names
// drives the model's steps; rank 0 decides when to stop and evaluates with opts.Eval; the
// heterogeneity cfg injects (slowdown, step sleep, stragglers) applies whatever the strategy.
// After Train, model.Params() holds this rank's final parameters.
func Train(ctx context.Context, ep transport.Endpoint, cfg Config, model Model, opts TrainOptions) (*Result, error) {
	w, strat, err := prepare(ep, cfg, model, opts)
	if err != nil {
		return nil, err
	}
	ropts := RunOptions{TrainSize: opts.TrainSize, Progress: opts.Progress, AfterEval: opts.AfterEval, Checkpoint: opts.Checkpoint, Failed: opts.Failed}
	if opts.AfterRound != nil {
		ropts.AfterRound = func(_ *Worker, rec *metrics.RoundRecord) { opts.AfterRound(rec) }
	}
	if w.Rank == 0 {
		ropts.Eval = opts.Eval
	}
	return Run(ctx, w, strat, ropts)
}

// prepare validates cfg and builds this rank's worker (over opts.Comm, or a communicator of
// its own running Config.Collective) and the strategy cfg names: what Train and NewSession
// share before the job starts.
func prepare(ep transport.Endpoint, cfg Config, model Model, opts TrainOptions) (*Worker, Strategy, error) {
	if ep == nil || model == nil {
		return nil, nil, fmt.Errorf("trainer: training needs an endpoint and a model")
	}
	reg := opts.Strategies
	if reg == nil {
		reg = Builtin()
	}
	given := cfg.Collective // before Validate gives an empty one the strategy's default
	if err := reg.Validate(&cfg, ep.Size()); err != nil {
		return nil, nil, err
	}
	if cfg.Epochs > 0 && opts.TrainSize <= 0 {
		return nil, nil, fmt.Errorf("trainer: rank %d: Config.Epochs %v needs the training-set size (TrainOptions.TrainSize)", ep.Rank(), cfg.Epochs)
	}
	ep = cfg.Stragglers.WrapEndpoint(ep)
	comm := opts.Comm
	if comm == nil {
		c, err := collective.New(ep, collective.Options{Algorithm: cfg.Collective, Links: opts.Links, Watch: opts.Watch})
		if err != nil {
			return nil, nil, fmt.Errorf("trainer: rank %d: Config.Collective: %w", ep.Rank(), err)
		}
		comm = c
	}
	w, err := NewWorker(&cfg, ep, comm, model)
	if err != nil {
		return nil, nil, err
	}
	w.Timeline = opts.Watch.Timeline
	strat, err := reg.New(&cfg)
	if err != nil {
		return nil, nil, err
	}
	if opts.Comm != nil {
		if err := checkGivenComm(given, opts.Comm, w, strat); err != nil {
			return nil, nil, err
		}
	}
	return w, strat, nil
}

// checkGivenComm refuses a Config.Collective (given, as the caller set it) that the
// communicator the caller gave would not run: the rounds of a strategy that runs over the
// communicator run its algorithm, whatever Config.Collective says. A strategy whose rounds run
// over its own parameter server (Config.Collective "ps"), or over nothing, serves
// Config.Collective itself. An empty given leaves the choice to the communicator
// (Result.Collective says what ran).
func checkGivenComm(given string, comm Collective, w *Worker, strat Strategy) error {
	if r, ok := strat.(ranOver); ok {
		if over := r.RanOver(w); over == ParameterServer || over == "none" {
			return nil
		}
	}
	if given == "" {
		return nil
	}
	named, ok := comm.(interface{ Algorithm() string })
	if !ok {
		return fmt.Errorf("trainer: rank %d: Config.Collective is %q, but the communicator in TrainOptions.Comm cannot say what it runs "+
			"(it has no Algorithm method): leave Config.Collective empty, or TrainOptions.Comm nil for Train to build one running %q", w.Rank, given, given)
	}
	if alg := named.Algorithm(); alg != given {
		return fmt.Errorf("trainer: rank %d: Config.Collective is %q, but TrainOptions.Comm runs %q and Train cannot change a given communicator's algorithm: "+
			"set Config.Collective to %q or leave it empty, or leave TrainOptions.Comm nil for Train to build one running %q", w.Rank, given, alg, alg, given)
	}
	return nil
}
