package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// RankResult is what RunRank returns.
type RankResult struct {
	Result  *Result
	Summary *metrics.Summary // rank 0 with Out set
}

// RunRank is a whole training rank over the user's model with a run directory: it trains the
// model through Train, gathers every rank's metrics to rank 0, and on rank 0 writes the run
// directory (as the job runs, so that a job that fails leaves what it measured) and prints
// the summary. `hetsync train` runs its built-in workload through it (package workload).
func RunRank(ctx context.Context, ep transport.Endpoint, cfg Config, model Model, opts TrainOptions) (*RankResult, error) {
	rank := ep.Rank()
	if opts.Checkpoint.Dir != "" || opts.Checkpoint.Resume != nil {
		return nil, fmt.Errorf("trainer: rank %d: RunRank checkpoints into its run directory (Out) and resumes from ResumeDir: "+
			"TrainOptions.Checkpoint may set only Every", rank)
	}
	// Train gets the same options less the run directory's, which are this function's.
	topts := opts
	topts.Out, topts.Record, topts.DataPath, topts.ResumeDir = "", nil, "", ""
	topts.Checkpoint = CheckpointOptions{Dir: opts.Out, Every: opts.Checkpoint.Every}
	var err, prepErr error
	if opts.ResumeDir != "" {
		if topts.Checkpoint.Resume, topts.Checkpoint.File, err = LoadCheckpoint(opts.ResumeDir, rank); err != nil {
			prepErr = fmt.Errorf("trainer: rank %d: --resume %s: %w", rank, opts.ResumeDir, err)
			if rank != 0 {
				return nil, prepErr
			}
		}
	}
	var kept []metrics.RoundRecord // a resumed run's rounds before its checkpoint
	config := opts.Record
	if config == nil {
		config = cfg
	}
	// Rank 0 rewinds and opens its run directory before the other ranks learn it: a directory
	// rank 0 cannot prepare is every rank's error, not rank 0's alone while the others wait
	// for the directory's name (as NewRunSession does).
	var live *liveRun
	if rank == 0 && prepErr == nil {
		if ck := topts.Checkpoint.Resume; ck != nil && opts.Out != "" {
			var evals []metrics.EvalRecord
			if kept, evals, prepErr = RewindRun(opts.Out, ck.Round); prepErr == nil {
				topts.Checkpoint.Evaluated = slices.ContainsFunc(evals, func(e metrics.EvalRecord) bool { return e.Round == ck.GlobalRounds })
			}
		}
		if prepErr == nil {
			live, prepErr = openLiveRun(opts.Out, 0, config, topts.Checkpoint.Resume != nil)
		}
	}
	runDir, err := shareRunDir(ctx, ep, opts.Out, prepErr)
	if err != nil {
		if live != nil {
			live.close()
		}
		return nil, err
	}
	// Per-rank checkpoints put every rank's part into rank 0's run directory.
	topts.Checkpoint.Dir = runDir
	if rank != 0 {
		if live, err = openLiveRun(runDir, rank, config, topts.Checkpoint.Resume != nil); err != nil {
			return nil, err
		}
	}
	topts.AfterRound, topts.AfterEval, topts.Failed = live.round, live.eval, live.err
	if after := opts.AfterRound; after != nil {
		topts.AfterRound = func(r *metrics.RoundRecord) { live.round(r); after(r) }
	}
	if after := opts.AfterEval; after != nil {
		topts.AfterEval = func(e EvalResult) { live.eval(e); after(e) }
	}
	if failed := opts.Failed; failed != nil {
		topts.Failed = func() error { return errors.Join(live.err(), failed()) }
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
