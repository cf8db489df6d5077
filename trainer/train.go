package trainer

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// TrainOptions are one rank's settings beyond the job's Config: the one options value that
// passes from the command line (or the user's program) through RunRank and Train to the round
// loop (Run), each of which uses its own fields and passes the rest on. Each hook is stated
// here once.
type TrainOptions struct {
	// Strategies are the strategies cfg.Strategy may name; nil means Builtin.
	Strategies *Registry
	// Eval evaluates a snapshot of the parameters on rank 0 (on a goroutine of its own, so
	// it must not share the model's device or buffers); nil disables evaluation, and with it
	// Config.TargetAcc. The other ranks' is not used.
	Eval EvalFunc
	// TrainSize is the number of training samples of the whole job, for Config.Epochs; 0
	// requires a bound other than epochs.
	TrainSize int
	// Comm is the communicator of the synchronous strategies; nil builds one over ep with
	// Config.Collective, planned from Links. A given Comm runs its own algorithm, which Train
	// cannot change: Config.Collective must then be empty or name that algorithm (its
	// Algorithm method), unless the strategy's rounds run over its own parameter server.
	Comm Collective
	// Links is the job's link matrix (hetsync.Comm.Links: --plan-links measure or a file),
	// the same on every rank, that the communicator Train builds plans from (auto, ring
	// order, ps placement, hier-); nil plans without one.
	Links *topology.Matrix
	// Watch is what the communicator Train builds reports (stalls, timeline); its Timeline
	// also gets a span per local step and per round.
	Watch collective.Watch
	// Progress receives rank 0's progress lines (and RunRank's final summary); nil prints
	// nothing. ProgressEvery is their period (default 1s).
	Progress      io.Writer
	ProgressEvery time.Duration
	// Checkpoint is where rank 0 writes checkpoints and what the run resumes from. Under
	// RunRank, Dir is the run directory and Resume is loaded from ResumeDir: set Every.
	Checkpoint CheckpointOptions
	// AfterRound, when set, sees each of this rank's round records as the round ends (tests,
	// live plots, an exporter), and AfterEval each of rank 0's evaluations as it is taken, the
	// final one last (a run directory written as the job runs).
	AfterRound func(*metrics.RoundRecord)
	AfterEval  func(EvalResult)
	// Failed, when set, is asked on rank 0 before each round: an error stops the job after
	// that round as a stop rule would, with the error as the reason (rank 0's run directory
	// that could not take a record: training on to the stop rule would lose it all). The
	// caller fails the run with the same error once Run returns; the other ranks stop cleanly.
	Failed func() error

	// The run directory, RunRank's (Train refuses them).
	//
	// Out is the run directory rank 0 writes ("" writes nothing). The other ranks take rank
	// 0's (their own Out is not used) and append their records to its ranks/ on their own
	// host as the job runs, a local copy of what they send rank 0 at the end.
	Out string
	// Record is what config.json records; nil records the Config.
	Record any
	// DataPath is the transport and data path of the job's bytes, for summary.json ("mem",
	// "p2p data-path=tcp"); "" records none.
	DataPath string
	// ResumeDir is the run directory whose checkpoint every rank continues from (it must be
	// readable at this path on every rank's host); rank 0 then continues that run directory,
	// which Out must name.
	ResumeDir string
}

// runDirFields refuses the run directory's options outside RunRank and NewRunSession, which
// alone honour them; use names the one of them that who's caller wants.
func (o TrainOptions) runDirFields(who, use string) error {
	for _, f := range []struct {
		set  bool
		name string
	}{{o.Out != "", "Out"}, {o.Record != nil, "Record"}, {o.DataPath != "", "DataPath"}, {o.ResumeDir != "", "ResumeDir"}} {
		if f.set {
			return fmt.Errorf("trainer: TrainOptions.%s is the run directory's, which %s does not write: use %s", f.name, who, use)
		}
	}
	return nil
}

// Train runs this rank of a training job on the user's model: every rank of the job calls it
// with the same Config (Run checks it at the start: see Config) and its own model, whose
// initial parameters Run replaces with rank 0's, as DDP and Horovod do, so that a model
// initialised differently on every rank still trains one model. The strategy cfg.Strategy names
// drives the model's steps; rank 0 decides when to stop and evaluates with opts.Eval; the
// heterogeneity cfg injects (slowdown, step sleep, stragglers) applies whatever the strategy.
// After Train, model.Params() holds this rank's final parameters.
func Train(ctx context.Context, ep transport.Endpoint, cfg Config, model Model, opts TrainOptions) (*Result, error) {
	if err := opts.runDirFields("Train", "RunRank"); err != nil {
		return nil, err
	}
	w, strat, err := prepare(ep, cfg, model, opts)
	if err != nil {
		return nil, err
	}
	return Run(ctx, w, strat, opts)
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
	// Decorated after the communicator is built over ep: the communicator counts its own calls.
	w, err := newWorker(&cfg, countLinks(ep, opts.Links), comm, model, reg.optimizers)
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
// over its own parameter server (Config.Collective CollectivePS), or over nothing, serves
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
