package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/kernels/cuda"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/metrics/exporter"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/workload"
	"github.com/hetsync/hetsync/workload/data"
)

// trainOptions is a parsed `hetsync train` command line.
type trainOptions struct {
	NP     int
	Config trainer.Config
	// Workload is what train trains: a built-in network on Fashion-MNIST.
	Workload workload.Workload
	Out      string
	DataDir  string
	netOptions
	Threads int
	// MetricsAddr is --metrics-addr: where ranks serve live Prometheus metrics ("" none).
	MetricsAddr string
	resumeOptions
	// strategies is the registry that validated Config: the rank's trainer takes it, and with
	// it the configuration as validated, not to be checked again.
	strategies *trainer.Registry
	// algorithms are the collective algorithms of a command line built with its own (Options);
	// nil for the built-in ones.
	algorithms *collective.Registry
}

// trainLaunch is what config.json records besides the training configuration.
type trainLaunch struct {
	workload.RunRecord
	Ranks     int    `json:"ranks"`
	Transport string `json:"transport"`
	DataPath  string `json:"data_path,omitempty"`
	Security  string `json:"security,omitempty"`
	// Sched is the scheduling policy rank 0's threads ran under (hetsync.Settings.Sched).
	Sched   string `json:"sched,omitempty"`
	Started string `json:"started"`
}

// rankJob is what a launcher says of the job this process is a rank of.
type rankJob struct {
	env   launcher.RankEnv
	under bool // started by a launcher: env holds its rank, size, ...
}

// trainOptionsFrom reads the command line of a process that job says whether a launcher
// started: flags become one configuration, defaulted and checked once, for the job's size.
func trainOptionsFrom(c *cli.Context, job rankJob) (trainOptions, error) {
	o := trainOptions{
		NP: c.Int("np"), Out: c.String("out"), DataDir: c.String("data"), netOptions: netOptionsFrom(c),
		Threads: c.Int("threads"), MetricsAddr: c.String("metrics-addr"),
	}
	cfg := trainer.Config{
		Strategy: c.String("sync"), Collective: c.String("collective"), Compress: c.String("compress"),
		Batch: c.Int("batch"), LR: c.Float64("lr"), Momentum: c.Float64("momentum"),
		WeightDecay: c.Float64("weight-decay"), GradReduction: c.String("grad-reduction"),
		Optimizer: c.String("optimizer"), Dampening: c.Float64("dampening"), Nesterov: c.Bool("nesterov"),
		Outer: c.String("outer"), OuterLR: c.Float64("outer-lr"),
		Seed: c.Uint64("seed"), TargetAcc: c.Float64("target-acc"),
		Epochs: c.Float64("epochs"), MaxTime: c.Duration("max-time"), MaxRounds: c.Int("max-rounds"),
	}
	// Adam's settings are unset unless given: the optimizer's own defaults then apply.
	for _, f := range []struct {
		name string
		p    **float64
	}{{"beta1", &cfg.Beta1}, {"beta2", &cfg.Beta2}, {"eps", &cfg.Eps}, {"outer-momentum", &cfg.OuterMomentum}} {
		if c.IsSet(f.name) {
			v := c.Float64(f.name)
			*f.p = &v
		}
	}
	var err error
	if s := c.String("eval-every"); s != "" {
		if cfg.Eval, err = trainer.ParseEvalEvery(s); err != nil {
			return o, err
		}
	}
	if cfg.Slowdown, err = trainer.ParseFloatList("slowdown", c.String("slowdown")); err != nil {
		return o, err
	}
	if cfg.StepSleep, err = trainer.ParseMillisList("step-sleep", c.String("step-sleep")); err != nil {
		return o, err
	}
	o.Workload = workload.Workload{Model: c.String("model"), Shard: c.String("shard")}
	if o.Workload.Devices, err = workload.ParseDevices(c.String("device")); err != nil {
		return o, err
	}
	// Ranks on other hosts may run another binary (--remote-bin); ranks here run this one.
	if !hostsGiven(c) && !cuda.Built && slices.ContainsFunc(o.Workload.Devices, func(d string) bool { return d != "cpu" }) {
		return o, fmt.Errorf("--device %s: this binary was built without CUDA support; rebuild with `make cuda` (go build -tags cuda)", c.String("device"))
	}
	if o.DataDir != "" && !hostsGiven(c) {
		if missing := data.HasFashionMNIST(o.DataDir); len(missing) > 0 {
			return o, fmt.Errorf("--data %s: missing %s", o.DataDir, strings.Join(missing, ", "))
		}
	}
	reg := optionsOf(c).strategies()
	if cfg.Options, err = strategyOptions(c, reg, cfg.Strategy); err != nil {
		return o, err
	}
	if err := applyHeteroFlags(c, &cfg); err != nil {
		return o, err
	}
	if err := applySlowdownBase(c, &cfg); err != nil {
		return o, err
	}
	cfg.DefaultsUnset(c.IsSet)
	o.Config = cfg
	o.Workload.Defaults()
	if o.NP < 0 {
		return o, fmt.Errorf("--np %d: must be at least 1", o.NP)
	}
	size := o.NP // the job's number of ranks, for which the configuration is checked
	switch {
	case job.under && !o.worldAllowed(c.Int("min-np"), job.env.Size):
		return o, fmt.Errorf("--np %d but the launcher started %d ranks", o.NP, job.env.Size)
	case job.under:
		size = job.env.Size
	case o.Transport == "mem" && o.NP == 0:
		return o, errors.New("--transport mem needs --np")
	case o.NP == 0:
		return o, errors.New("--np: required when train is not started by a launcher")
	}
	// The one check of the configuration, for the job's size: the strategy's registry defaults
	// what derives from the rest, checks it and decides whether the strategy runs over the
	// collective; the collective itself is the communicator's to check, before anything starts.
	if err := reg.Validate(&o.Config, size); err != nil {
		return o, trainer.InFlags(err) // the library names Config fields; here they are flags
	}
	o.strategies, o.algorithms = reg, optionsOf(c).Algorithms
	if err := (collective.Options{Algorithm: o.Config.Collective, Registry: optionsOf(c).Algorithms}).Check(size); err != nil {
		return o, fmt.Errorf("--collective %q: %w", o.Config.Collective, err)
	}
	if err := o.Workload.Validate(size); err != nil {
		return o, err
	}
	if o.resumeOptions, err = resumeOptionsFrom(c, &o); err != nil {
		return o, err
	}
	if err := o.netOptions.validate(); err != nil {
		return o, err
	}
	if o.MetricsAddr != "" {
		if _, err := exporter.RankAddr(o.MetricsAddr, 0); err != nil {
			return o, err
		}
	}
	if o.Threads < 0 {
		return o, fmt.Errorf("--threads %d: must not be negative", o.Threads)
	}
	return o, nil
}

func (o trainOptions) record(size int) trainLaunch {
	l := trainLaunch{RunRecord: workload.RunRecord{Config: o.Config, Workload: o.Workload}, Ranks: size, Transport: o.Transport, Started: time.Now().UTC().Format(time.RFC3339)}
	if o.Transport == "p2p" {
		l.DataPath, l.Security = o.DataPath, o.Security
	}
	return l
}

// recordOf is the run's record as rank 0 of c's job writes it: the options and what the job
// applied.
func (o trainOptions) recordOf(c *hetsync.Comm) trainLaunch {
	l := o.record(c.Size())
	l.Sched = c.Settings().Sched
	return l
}

// outDir is --out, or runs/SYNC-COLLECTIVE-TIMESTAMP.
func (o trainOptions) outDir() string {
	if o.Out != "" {
		return o.Out
	}
	return metrics.RunPath("runs", o.Config.Strategy+"-"+o.Config.Collective, time.Now())
}

func trainCommand(opts Options) *cli.Command {
	def := trainer.DefaultConfig() // what the flags' defaults are: Config's own
	return &cli.Command{
		Name:         "train",
		OnUsageError: onUsageError,
		Usage:        "train a model on Fashion-MNIST with a synchronization strategy",
		Description: "Without a launcher around it, train starts --np ranks of itself on this machine, or over SSH\n" +
			"on the hosts of -H/--hostfile (the same supervision as hetsync launch) and shows rank 0's progress; under a launcher (HETSYNC_RANK set)\n" +
			"it runs as one rank. Rank 0 decides when to stop (--target-acc, --epochs, --max-time,\n" +
			"--max-rounds; without any bound, 3 epochs) and every rank stops after the same agreed round.\n" +
			"Rank 0 gathers every rank's metrics and writes --out: config.json, metrics.jsonl, eval.jsonl,\n" +
			"summary.json. --transport mem runs all ranks as goroutines of one process.\n\n" +
			"--checkpoint-every writes a checkpoint into the run directory; --resume RUN_DIR continues it with\n" +
			"no round lost or repeated; --max-restarts K starts a job whose rank failed again from its last\n" +
			"checkpoint, up to K times (each rank sees HETSYNC_RESTART_COUNT).",
		// Usage lines stay short; docs/using.md ("Command-line flags") explains the longer ones.
		Flags: slices.Concat(inCategory(catTraining,
			&cli.IntFlag{Name: "np", Aliases: []string{"n"}, Category: catJob, DefaultText: "the launcher's world size", Usage: "number of ranks (required without a launcher)"},
			&cli.StringFlag{Name: "sync", Value: def.Strategy, Category: catStrategy, Usage: "strategy: " + strings.Join(opts.strategies().Names(), ", ")},
			&cli.StringFlag{Name: "collective", Category: catStrategy, DefaultText: trainer.DefaultCollective + ", or ps for a strategy that runs only over it",
				Usage: "what the rounds run over: " + strings.Join(collective.Algorithms(), ", ") + " (ps: the parameter server)"},
			&cli.StringFlag{Name: "compress", Category: catStrategy, DefaultText: "none",
				Usage: "esync's and ssgd's round vectors as none, bf16, fp16, int8 (error feedback, float32 reduction), or auto: int8 between hosts"},
			&cli.StringFlag{Name: "model", Value: "mlp", Usage: "mlp or cnn"},
			&cli.IntFlag{Name: "batch", Value: def.Batch, Usage: "per-rank mini-batch size"},
			&cli.Float64Flag{Name: "lr", DefaultText: fmt.Sprintf("%g; %g/batch with --grad-reduction sum", trainer.DefaultLR("mean", 1), trainer.DefaultLR("sum", 1)), Usage: "learning rate"},
			&cli.StringFlag{Name: "optimizer", DefaultText: trainer.DefaultOptimizer, Usage: "workers' optimizer: " + strings.Join(opts.strategies().Optimizers().Names(), ", ") + " (torch.optim's semantics; the parameter-server strategies' rule is sgd)"},
			&cli.Float64Flag{Name: "momentum", Value: 0.9, Usage: "SGD's momentum (0 under another --optimizer unless given; asgd's server rule is plain SGD)"},
			&cli.Float64Flag{Name: "dampening", Usage: "SGD's dampening of the gradient in the velocity"},
			&cli.BoolFlag{Name: "nesterov", Usage: "SGD's Nesterov momentum"},
			&cli.Float64Flag{Name: "beta1", DefaultText: "0.9", Usage: "Adam's and AdamW's first-moment decay"},
			&cli.Float64Flag{Name: "beta2", DefaultText: "0.999", Usage: "Adam's and AdamW's second-moment decay"},
			&cli.Float64Flag{Name: "eps", DefaultText: "1e-08", Usage: "Adam's and AdamW's term added to the denominator, outside the square root"},
			&cli.Float64Flag{Name: "weight-decay", Usage: "weight decay: SGD's and Adam's L2 penalty, AdamW's decoupled decay"},
			&cli.StringFlag{Name: "outer", DefaultText: trainer.OuterNone, Category: catStrategy, Usage: "outer optimizer of the rounds that average local steps (esync, wbsp and wbsp-opt over an allreduce): none, " + trainer.OuterNesterov + " (DiLoCo's) or " + strings.Join(opts.strategies().Optimizers().Names(), ", ") + ", stepping the global model with the round's averaged delta as a pseudo-gradient"},
			&cli.Float64Flag{Name: "outer-lr", DefaultText: fmt.Sprintf("%g with --outer nesterov, 1 with sgd", trainer.DefaultOuterNesterovLR), Category: catStrategy, Usage: "the outer optimizer's learning rate"},
			&cli.Float64Flag{Name: "outer-momentum", DefaultText: fmt.Sprintf("%g with --outer nesterov, 0 with sgd", trainer.DefaultOuterNesterovMomentum), Category: catStrategy, Usage: "the outer optimizer's momentum"},
			&cli.StringFlag{Name: "grad-reduction", Value: def.GradReduction, Usage: "a rank's gradient over its batch: mean or sum (ESync's convention)"},
			&cli.StringFlag{Name: "shard", Value: "iid", Usage: "training-set split: iid, by-class, by-class-shuffled"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the model initialisation and batch order"},
			&cli.Float64Flag{Name: "target-acc", Usage: "stop when rank 0's evaluation reaches this test accuracy"},
			&cli.Float64Flag{Name: "epochs", DefaultText: fmt.Sprintf("%g when no other bound is given", def.Epochs), Usage: "stop after this many epochs over the whole training set"},
			&cli.DurationFlag{Name: "max-time", Usage: "stop after this much training time"},
			&cli.IntFlag{Name: "max-rounds", Usage: "stop after this many rounds"},
			&cli.StringFlag{Name: "eval-every", Value: def.Eval.String(), Usage: "evaluate every N rounds (20) or every duration (5s)"},
			&cli.StringFlag{Name: "slowdown", Category: catHetero, Usage: "per-rank slowdown factors, e.g. 1,1,2,4"},
			&cli.StringFlag{Name: "step-sleep", Category: catHetero, Usage: "per-rank sleep per step in ms, e.g. 0,0,10,20"},
			&cli.StringFlag{Name: "slowdown-base", Value: "step", Category: catHetero, Usage: "what --slowdown multiplies: step (each step's own compute time), tfast or a duration (3ms): the time of a factor-1 step, which a rank then pads its step to"},
			&cli.StringFlag{Name: "out", Category: catOutput, DefaultText: "runs/SYNC-COLLECTIVE-TIME", Usage: "run directory"},
			&cli.StringFlag{Name: "data", DefaultText: "$HETSYNC_DATA, the Debian package, the cache, else a download", Usage: "Fashion-MNIST directory"},
			&cli.IntFlag{Name: "threads", DefaultText: "cores / ranks on this host", Usage: "kernel threads per rank"},
			&cli.StringFlag{Name: "metrics-addr", Category: catOutput, Usage: "serve each rank's live Prometheus metrics at http://HOST:PORT/metrics (rank r of a host on PORT+r; port 0 picks free ports)"},
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "compute device: cpu, cuda:N, or one per rank (cuda:0,cpu,cpu,cpu); cuda needs a CUDA build (make cuda)"},
		), inCategory(catTraining, resumeFlags()...), inCategory(catHetero, heteroFlags()...), netFlags(0),
			inCategory(catStrategy, strategyFlags(opts.strategies())...), jobFlags(true)),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("train: unexpected arguments %q", c.Args().Slice())
			}
			var job rankJob
			if c.String("transport") != "mem" {
				var err error
				if job.env, job.under, err = launcher.RankEnvFromEnviron(os.Getenv); err != nil {
					return fmt.Errorf("train: reading the rank environment: %w", err)
				}
			}
			o, err := trainOptionsFrom(c, job)
			if err != nil {
				return usageError{err}
			}
			if err := checkLocalRanks(c, o.NP, o.Transport, 0); err != nil {
				return usageError{err}
			}
			if o.Transport == "mem" {
				o.Out = o.outDir() // fixed once: the default is named after the time
				if err := o.Watch.checkTimelineFiles(o.NP, os.Getenv); err != nil {
					return usageError{err}
				}
				lock, err := o.prepareRunDir(o.record(o.NP))
				if err != nil {
					return usageError{err}
				}
				defer lock.Close()
				return trainMem(c.Context, o, c.App.Writer)
			}
			if job.under {
				return trainRank(c.Context, o, c.App.Writer, c.App.ErrWriter)
			}
			return trainLaunchJob(c, o)
		},
	}
}

// commOptions are the options of the job's communicator beyond the transport's: the
// collective the rounds run over.
func (o trainOptions) commOptions() []hetsync.Option {
	opts := []hetsync.Option{hetsync.WithAlgorithm(o.Config.Collective)}
	if o.algorithms != nil {
		opts = append(opts, hetsync.WithAlgorithms(o.algorithms))
	}
	return opts
}

// rankOptions are the trainer's options on rank c of the job, of which localSize ranks share
// its host: the rounds run over c, the job's one communicator. The exception is a rank that
// transient network stragglers slow (--stragglers, mode network): their delays decorate the
// endpoint under its communicator from the rank's first training message on, so the trainer
// builds that rank's communicator over the decorated endpoint itself.
func (o trainOptions) rankOptions(c *hetsync.Comm, localSize int) workload.Options {
	ropts := workload.Options{DataDir: o.DataDir, Threads: o.Threads, LocalSize: localSize,
		TrainOptions: trainer.TrainOptions{Links: c.Links(), DataPath: dataPathOf(c), Watch: c.Watch(), Comm: c.Comm, Strategies: o.strategies}}
	if ep := c.Endpoint(); o.Config.Stragglers.WrapEndpoint(ep) != ep {
		ropts.Comm = nil
	}
	return ropts
}

// trainRank runs this process as one rank of a launched job, formed by hetsync.Init.
func trainRank(ctx context.Context, o trainOptions, out, errOut io.Writer) error {
	ctx, cancel := context.WithCancel(ctx) // ends the metrics server with the rank
	defer cancel()
	err := o.joinRank(ctx, func(c *hetsync.Comm) error {
		ropts := o.rankOptions(c, c.LocalSize())
		if o.MetricsAddr != "" {
			addr, err := exporter.RankAddr(o.MetricsAddr, c.Rank())
			if err != nil {
				return fmt.Errorf("rank %d: %w", c.Rank(), err)
			}
			if err := serveMetrics(ctx, addr, errOut, fmt.Sprintf("rank %d", c.Rank()), &ropts.TrainOptions); err != nil {
				return fmt.Errorf("rank %d: %w", c.Rank(), err)
			}
		}
		if c.Rank() == 0 {
			rec := o.recordOf(c)
			ropts.Out, ropts.Record, ropts.Progress, ropts.DataProgress = o.outDir(), rec, out, errOut
			lock, err := o.prepareRunDir(rec)
			if err != nil {
				return fmt.Errorf("rank 0: %w", err)
			}
			defer lock.Close()
		}
		o.resumeOptions.rankOptions(c.Rank(), &ropts.TrainOptions)
		_, err := workload.RunRank(ctx, c.Endpoint(), o.Config, o.Workload, ropts)
		return trainer.InFlags(err) // the ranks' own checks name Config fields: here they are flags
	}, o.commOptions()...)
	return collectiveFlagError(err, o.Config.Collective)
}

// dataPathOf is the transport and data path of c's job, as summary.json records it.
func dataPathOf(c *hetsync.Comm) string {
	s := c.Settings()
	if s.DataPath == "" {
		return s.Transport
	}
	return s.Transport + " data-path=" + s.DataPath
}

// serveMetrics serves an exporter of the ranks whose options it hooks into at addr until ctx
// ends, and prints where; who names the ranks in that line.
func serveMetrics(ctx context.Context, addr string, errOut io.Writer, who string, hooks ...*trainer.TrainOptions) error {
	ex := exporter.New()
	at, err := ex.Serve(ctx, addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "%s: live metrics at http://%s/metrics\n", who, at)
	for _, h := range hooks {
		h.AfterRound = ex.Observe
		h.AfterEval = func(e trainer.EvalResult) {
			if e.Err == nil {
				ex.ObserveEval(e.Acc, e.Loss)
			}
		}
	}
	return nil
}

// trainMem runs every rank as a goroutine over the in-process transport.
func trainMem(ctx context.Context, o trainOptions, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx) // ends the metrics server with the job
	defer cancel()
	// one exporter serves every rank of the process, told apart by their rank label
	var hook trainer.TrainOptions
	if o.MetricsAddr != "" {
		if err := serveMetrics(ctx, o.MetricsAddr, os.Stderr, fmt.Sprintf("ranks 0-%d", o.NP-1), &hook); err != nil {
			return err
		}
	}
	err := hetsync.InitLocal(ctx, o.NP, func(ctx context.Context, c *hetsync.Comm) error {
		ropts := o.rankOptions(c, o.NP)
		ropts.AfterRound, ropts.AfterEval = hook.AfterRound, hook.AfterEval
		if c.Rank() == 0 {
			ropts.Out, ropts.Record, ropts.Progress, ropts.DataProgress = o.outDir(), o.record(o.NP), out, os.Stderr
		}
		o.resumeOptions.rankOptions(c.Rank(), &ropts.TrainOptions)
		_, err := workload.RunRank(ctx, c.Endpoint(), o.Config, o.Workload, ropts)
		return trainer.InFlags(err)
	}, append(o.Watch.initOptions(), o.commOptions()...)...)
	err = collectiveFlagError(err, o.Config.Collective)
	if err != nil {
		sayEnding(os.Stderr, "hetsync train", o.outDir())
	}
	return err
}

// trainLaunchJob starts --np ranks of this same command line through the launcher; rank 0's
// progress and summary pass through unprefixed. The run directory is fixed here so that it
// does not depend on when rank 0 starts.
func trainLaunchJob(c *cli.Context, o trainOptions) error {
	var extra []string
	if o.Out == "" {
		o.Out = o.outDir()
		extra = []string{"--out", o.Out}
	}
	// Rank 0 may run on another host: its own checks are the ones that count there.
	local := !hostsGiven(c)
	if local {
		if err := o.Watch.checkTimelineFiles(o.NP, os.Getenv); err != nil {
			return usageError{err}
		}
		// Held until the job, its restarts and closeFailedRun are done: rank 0, a child of
		// this process, finds it held by its parent and goes on.
		lock, err := o.prepareRunDir(o.record(o.NP))
		if err != nil {
			return usageError{err}
		}
		defer lock.Close()
	}
	err := runTrainJob(c, o, extra)
	if err != nil && local {
		closeFailedRun(c.App.ErrWriter, "hetsync train", o.Out, err)
	}
	return err
}

// closeFailedRun gives the run directory of a failed job a summary.json that says it ended
// early (cmd, hetsync train or launch, names itself in what it prints), when rank 0 did not write one itself (it was killed, or never got to its run
// directory), so that what the ranks wrote is reported as a run that ended early. When the
// launcher stopped rank 0 (a rank failed first, Ctrl-C, --timeout), rank 0 saw only its own
// stop: the launcher's account, naming the rank that failed or the signal, replaces it. When
// the launcher stopped the job from outside (Ctrl-C, SIGTERM, --timeout), it replaces
// whatever rank 0 wrote: the ranks get the stop one after another, and rank 0 may first hear
// of it as another rank giving up on a collective, a failure that is only the stop's echo.
func closeFailedRun(errOut io.Writer, cmd, dir string, cause error) {
	if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); err != nil {
		return // rank 0 never started the run: there is nothing to report
	}
	var interrupted *launcher.Interrupted
	var timedOut *launcher.TimedOut
	stopped := errors.As(cause, &interrupted) || errors.As(cause, &timedOut)
	if s, err := metrics.ReadSummary(dir); err == nil && s.EndedEarly != nil &&
		(stopped || strings.HasPrefix(s.EndedEarly.Reason, metrics.Interrupted)) {
		s.EndedEarly.Reason = cause.Error()
		if err := metrics.WriteSummary(dir, s); err != nil {
			fmt.Fprintf(errOut, "%s: %v\n", cmd, err)
		}
	}
	if _, err := metrics.EndEarly(dir, cause.Error()); err != nil {
		fmt.Fprintf(errOut, "%s: the run directory %s has no summary: %v\n", cmd, dir, err)
		return
	}
	sayEnding(errOut, cmd, dir)
}

// sayEnding prints where and why the run in dir ended early, if it did.
func sayEnding(errOut io.Writer, cmd, dir string) {
	if s, err := metrics.ReadSummary(dir); err == nil && s.EndedEarly != nil {
		fmt.Fprintf(errOut, "%s: run %s %s\n", cmd, dir, s.EndedEarly)
	}
}

// prepareRunDir checks and locks --out before the first step (prepareRunDir), or, for a
// resumed run, the run directory it continues, whose config.json then records rec, what the
// resumed run uses (recordResume).
func (o trainOptions) prepareRunDir(rec trainLaunch) (*runLock, error) {
	if o.Resume == "" {
		return prepareRunDir(o.outDir())
	}
	if err := trainer.HasCheckpoint(o.Resume); err != nil {
		return nil, fmt.Errorf("--resume %s: %w", o.Resume, err)
	}
	lock, err := lockRunDir("--resume", o.Resume)
	if err != nil {
		return nil, err
	}
	if err := checkWritable(o.Resume); err != nil {
		lock.Close()
		return nil, fmt.Errorf("--resume %s: %w", o.Resume, err)
	}
	if err := recordResume(o.Resume, rec, lock != nil, o.strategies); err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}
