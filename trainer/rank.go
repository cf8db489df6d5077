package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// RankOptions are one rank's local settings for RunRank.
type RankOptions struct {
	// Eval evaluates snapshots on rank 0 (TrainOptions.Eval); the other ranks' is not used.
	Eval EvalFunc
	// TrainSize is the number of training samples of the whole job (TrainOptions.TrainSize).
	TrainSize int
	// Out is the run directory rank 0 writes ("" writes nothing). The other ranks take rank
	// 0's (their own Out is not used) and append their records to its ranks/ on their own
	// host as the job runs, a local copy of what they send rank 0 at the end.
	Out string
	// Config is what config.json records; nil records the Config.
	Config any
	// Progress receives rank 0's progress lines and the final summary; nil is silent.
	Progress io.Writer
	// Strategies are the strategies cfg.Strategy may name; nil means Builtin.
	Strategies *Registry
	// Links is the job's link matrix (hetsync.Comm.Links: --plan-links measure or a file), the
	// same on every rank; the training communicator plans its collectives from it. nil plans
	// without one.
	Links *topology.Matrix
	// DataPath is the transport and data path of the job's bytes, for summary.json ("mem",
	// "p2p data-path=tcp"); "" records none.
	DataPath string
	// Watch is what the rank's communicator reports (TrainOptions.Watch).
	Watch collective.Watch
	// CheckpointEvery is how often a checkpoint is written into rank 0's Out (by rank 0, or
	// each rank its part for a PerRankCheckpointer); zero writes none.
	CheckpointEvery EvalEvery
	// Resume is the run directory whose checkpoint every rank continues from (it must be
	// readable at this path on every rank's host); rank 0 then continues that run directory,
	// which Out must name.
	Resume string
	// AfterRound and AfterEval, when set, see each of this rank's round records and rank 0's
	// evaluations as they are taken (a live exporter), besides the run directory.
	AfterRound func(*metrics.RoundRecord)
	AfterEval  func(EvalResult)
}

// RankResult is what RunRank returns.
type RankResult struct {
	Result  *Result
	Summary *metrics.Summary // rank 0 with Out set
}

// RunRank is a whole training rank over the user's model with a run directory: it trains the
// model through Train, gathers every rank's metrics to rank 0, and on rank 0 writes the run
// directory (as the job runs, so that a job that fails leaves what it measured) and prints
// the summary. `hetsync train` runs its built-in workload through it (package workload).
func RunRank(ctx context.Context, ep transport.Endpoint, cfg Config, model Model, opts RankOptions) (*RankResult, error) {
	rank := ep.Rank()
	topts := TrainOptions{Strategies: opts.Strategies, TrainSize: opts.TrainSize, Progress: opts.Progress, Links: opts.Links, Watch: opts.Watch,
		Checkpoint: CheckpointOptions{Dir: opts.Out, Every: opts.CheckpointEvery}}
	var err error
	if opts.Resume != "" {
		if topts.Checkpoint.Resume, topts.Checkpoint.File, err = LoadCheckpoint(opts.Resume, rank); err != nil {
			return nil, fmt.Errorf("trainer: rank %d: --resume %s: %w", rank, opts.Resume, err)
		}
	}
	if rank == 0 {
		topts.Eval = opts.Eval
	}
	var kept []metrics.RoundRecord // a resumed run's rounds before its checkpoint
	if ck := topts.Checkpoint.Resume; ck != nil && rank == 0 && opts.Out != "" {
		// Before the other ranks learn the run directory and append to their files in it.
		var evals []metrics.EvalRecord
		if kept, evals, err = RewindRun(opts.Out, ck.Round); err != nil {
			return nil, err
		}
		topts.Checkpoint.Evaluated = slices.ContainsFunc(evals, func(e metrics.EvalRecord) bool { return e.Round == ck.GlobalRounds })
	}
	runDir, err := shareRunDir(ctx, ep, opts.Out)
	if err != nil {
		return nil, err
	}
	// Per-rank checkpoints put every rank's part into rank 0's run directory.
	topts.Checkpoint.Dir = runDir
	config := opts.Config
	if config == nil {
		config = cfg
	}
	live, err := openLiveRun(runDir, rank, config, topts.Checkpoint.Resume != nil)
	if err != nil {
		return nil, err
	}
	topts.AfterRound, topts.AfterEval, topts.Failed = live.round, live.eval, live.err
	if after := opts.AfterRound; after != nil {
		topts.AfterRound = func(r *metrics.RoundRecord) { live.round(r); after(r) }
	}
	if after := opts.AfterEval; after != nil {
		topts.AfterEval = func(e EvalResult) { live.eval(e); after(e) }
	}
	fail := func(err error) (*RankResult, error) {
		if eerr := live.endEarly(ctx, err); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return nil, err
	}
	res, err := Train(ctx, ep, cfg, model, topts)
	if err != nil {
		return fail(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	all, err := GatherRecords(gctx, ep, res.Records)
	if err != nil {
		return fail(err)
	}
	out := &RankResult{Result: res}
	if rank != 0 || runDir == "" {
		live.close()
		return out, live.err()
	}
	sum, err := live.finish(append(kept, all...), Ran{Collective: res.Collective, DataPath: opts.DataPath})
	if err != nil {
		return fail(err)
	}
	out.Summary = &sum
	if opts.Progress != nil {
		fmt.Fprint(opts.Progress, FormatSummary(sum, res.StopReason))
		fmt.Fprintf(opts.Progress, "  run directory: %s\n", opts.Out)
	}
	return out, nil
}
