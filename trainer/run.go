package trainer

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
)

// RunOptions are the per-rank knobs of Run that are not part of the shared Config.
type RunOptions struct {
	// Eval tests a snapshot (rank 0 only); nil disables evaluation.
	Eval EvalFunc
	// TrainSize is the number of training samples of the whole job, for epoch counting.
	TrainSize int
	// Progress receives rank 0's progress lines; nil prints nothing.
	Progress io.Writer
	// ProgressEvery is the period of progress lines (default 1s).
	ProgressEvery time.Duration
	// AfterRound, when set, sees each round's record on every rank (tests, live plots).
	AfterRound func(w *Worker, rec *metrics.RoundRecord)
	// AfterEval, when set, sees each of rank 0's evaluations as it is taken, the final one
	// last (a run directory written as the job runs).
	AfterEval func(EvalResult)
	// Checkpoint is where rank 0 writes checkpoints, and what the run resumes from.
	Checkpoint CheckpointOptions
	// Failed, when set, is asked on rank 0 before each round: an error stops the job after
	// that round as a stop rule would, with the error as the reason (rank 0's run directory
	// that could not take a record: training on to the stop rule would lose it all). The
	// caller fails the run with the same error once Run returns; the other ranks stop cleanly.
	Failed func() error
}

// Result is what Run returns on one rank.
type Result struct {
	Records    []metrics.RoundRecord // this rank's rounds
	Evals      []EvalResult          // rank 0: every evaluation, the final one last
	StopReason string                // rank 0: why the job stopped
	Elapsed    time.Duration         // training time (first round to agreed stop)
	FinalAcc   float64               // rank 0: accuracy of the final model, negative when not evaluated
	FinalLoss  float64
	// Collective is what the rounds ran over: the allreduce configuration the communicator
	// ran for the model's vector (for auto, the one auto chose), ParameterServer, or "none".
	Collective string
}

// Run trains w with strat until all ranks agree to stop (see stop.go for how). It starts with
// a barrier that checks that every rank holds the same configuration (agree.go) and gives
// every rank rank 0's parameters (start.go). Rank 0 decides
// the stop, evaluates snapshots on its own goroutine and prints progress; every rank records
// one RoundRecord per round.
func Run(ctx context.Context, w *Worker, strat Strategy, opts RunOptions) (_ *Result, err error) {
	cfg := w.Cfg
	rule := StopRule{TargetAcc: cfg.TargetAcc, Epochs: cfg.Epochs, MaxTime: cfg.MaxTime, MaxRounds: cfg.MaxRounds, TrainSize: opts.TrainSize}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = time.Second
	}
	cp, err := checkpointer(strat, opts.Checkpoint)
	if err != nil {
		return nil, err
	}
	res := &Result{FinalAcc: -1, FinalLoss: -1}
	evalCtx, cancelEval := context.WithCancel(ctx)
	defer cancelEval()
	var ev *evaluator
	if w.Rank == 0 && opts.Eval != nil {
		ev = newEvaluator(evalCtx, opts.Eval, len(w.Params))
		if opts.AfterEval != nil {
			defer func() {
				if err == nil {
					return
				}
				// The evaluations that finished before the failure are measurements of the
				// run all the same (a resumed run keeps those of rounds up to its checkpoint):
				// record them rather than drop them with the job. One still running is not
				// waited for, so that the failure is reported at once.
				for _, r := range ev.Take() {
					if r.Err == nil {
						opts.AfterEval(r)
					}
				}
			}()
		}
	}
	// Align the ranks' clocks (every time_s then counts from nearly the same instant), check
	// that they share the configuration, and start every rank from rank 0's parameters
	// (start.go).
	if err := agreeStart(ctx, w, opts.Checkpoint.Resume); err != nil {
		return nil, err
	}
	if err := broadcastParams(ctx, w); err != nil {
		return nil, err
	}
	if _, ok := strat.(PerRankCheckpointer); ok {
		if opts.Checkpoint, err = sharePerRankPlan(ctx, w, opts.Checkpoint); err != nil {
			return nil, err
		}
		if cp, err = checkpointer(strat, opts.Checkpoint); err != nil {
			return nil, err
		}
	}
	// Heterogeneity is the worker's, whatever the strategy: compute-mode stragglers count
	// their windows from here, as the rounds' clocks do.
	applyComputeStragglers(w)
	late := startLateWaits(w.Comm)
	if err := strat.Start(ctx, w); err != nil {
		return nil, err
	}
	finished := false
	defer func() {
		if !finished {
			_ = strat.Finish(ctx, w)
		}
	}()

	var (
		prog       Progress
		first      int
		resumed    time.Duration
		lastStats  = w.Endpoint.Stats()
		lastEval   time.Duration
		lastPrint  time.Duration
		samples    int64
		lastAcc    = -1.0
		lastLoss   = -1.0
		reason     string
		byTarget   bool // reason is the target accuracy, reached by an earlier snapshot
		accByRound = map[int]float64{}
	)
	if ck := opts.Checkpoint.Resume; ck != nil {
		if err := restoreCheckpoint(w, cp, ck, opts.Checkpoint.File); err != nil {
			return nil, err
		}
		first, resumed = ck.Round, ck.Elapsed
		prog.Rounds, prog.GlobalSamples = ck.GlobalRounds, ck.GlobalSamples
		if ev != nil && !opts.Checkpoint.Evaluated && cfg.Eval.Rounds > 0 && ck.Round%cfg.Eval.Rounds == 0 {
			// The checkpoint's round was due for evaluation and the run being continued
			// holds none (see CheckpointOptions.Evaluated). The restored parameters are the
			// snapshot that evaluation would have seen. It runs here, before the first
			// round, on the evaluator's function while the evaluator is still idle.
			t0 := time.Now()
			r := EvalResult{Round: ck.Round - 1, GlobalRound: ck.GlobalRounds, SnapshotTime: ck.Elapsed,
				GlobalSamples: ck.GlobalSamples, Epochs: rule.EpochsDone(prog)}
			r.Acc, r.Loss, r.Err = opts.Eval(ctx, w.Params)
			if r.Err != nil {
				return nil, fmt.Errorf("trainer: rank 0: evaluating the round-%d snapshot restored from %s: %w", r.Round, opts.Checkpoint.File, r.Err)
			}
			r.EvalSeconds = time.Since(t0).Seconds()
			ev.Counted(r)
			res.Evals = append(res.Evals, r)
			if opts.AfterEval != nil {
				opts.AfterEval(r)
			}
			lastAcc, lastLoss = r.Acc, r.Loss
		}
	}
	// A resumed run's clock continues from the checkpoint, as its rounds do.
	start := w.Now().Add(-resumed)
	lastEval, lastCheckpoint := resumed, resumed
	prog.BestAcc = -1
	for round := first; ; round++ {
		vote := false
		if w.Rank == 0 {
			prog.Elapsed = w.Now().Sub(start)
			if ev != nil {
				prog.BestAcc, prog.BestRound = ev.Best()
			}
			if reason == "" {
				// Judge the progress this round will have made, so that the vote rides on
				// the round that reaches a round or epoch bound (N rounds run, not N+1).
				next := prog
				if a, ok := strat.(asynchronous); ok && a.Asynchronous() {
					// One push: a global round (size updates) is reached by the updates
					// themselves, so --max-rounds N means at least N·size updates.
					next.GlobalSamples += int64(cfg.Batch)
				} else {
					next.Rounds++
					next.GlobalSamples += int64(w.Size) * int64(cfg.Batch)
				}
				if stop, why := rule.Decide(next); stop {
					reason, byTarget = why, rule.ReachedTarget(next)
				}
				if opts.Failed != nil {
					if err := opts.Failed(); err != nil {
						reason = "stopped: " + err.Error()
					}
				}
			}
			vote = reason != ""
		}
		roundStart := time.Now()
		st, err := strat.Round(ctx, w, vote)
		if err != nil {
			return nil, err
		}
		w.Timeline.Span(collective.TrackUser, "round", roundStart, time.Now(), "round", round, "local_steps", st.LocalSteps, "wait_s", st.Wait.Seconds())
		now := w.Now().Sub(start)
		stats := w.Endpoint.Stats()
		rec := metrics.RoundRecord{
			Rank: w.Rank, Round: round, TimeS: now.Seconds(), Samples: st.Samples, LocalSteps: st.LocalSteps,
			ComputeS: st.Compute.Seconds(), CommS: st.Comm.Seconds(), WaitS: st.Wait.Seconds(),
			BytesSent: int64(stats.BytesSent - lastStats.BytesSent), BytesRecv: int64(stats.BytesRecv - lastStats.BytesRecv),
			Loss: st.Loss,
		}
		rec.LateRank, rec.LateWaitS = late.round()
		rec.Extra = roundExtras(st)
		lastStats = stats
		samples += int64(st.Samples)
		prog.Rounds, prog.GlobalSamples = st.GlobalRounds, st.GlobalSamples
		res.Records = append(res.Records, rec)
		if cp != nil && !st.Stop {
			if err := checkpointAfter(ctx, w, cp, opts.Checkpoint, round, st, now, &lastCheckpoint); err != nil {
				return nil, err
			}
		}
		if opts.AfterRound != nil {
			opts.AfterRound(w, &res.Records[len(res.Records)-1])
		}
		if ev != nil && !st.Stop {
			due := (cfg.Eval.Rounds > 0 && (round+1)%cfg.Eval.Rounds == 0) ||
				(cfg.Eval.Interval > 0 && now-lastEval >= cfg.Eval.Interval)
			if due {
				lastEval = now
				ev.Offer(w.Params, EvalResult{Round: round, GlobalRound: st.GlobalRounds, SnapshotTime: now, GlobalSamples: st.GlobalSamples, Epochs: rule.EpochsDone(prog)})
			}
			for _, r := range ev.Take() {
				res.Evals = append(res.Evals, r)
				if opts.AfterEval != nil {
					opts.AfterEval(r)
				}
				if r.Err != nil {
					return nil, fmt.Errorf("trainer: rank 0: evaluating the round-%d snapshot: %w", r.Round, r.Err)
				}
				lastAcc, lastLoss = r.Acc, r.Loss
				accByRound[r.Round] = r.Acc
			}
		}
		if w.Rank == 0 && opts.Progress != nil && (now-lastPrint >= opts.ProgressEvery || st.Stop) {
			lastPrint = now
			prog.Elapsed = now
			if ev != nil {
				prog.BestAcc, prog.BestRound = ev.Best()
			}
			writeProgress(opts.Progress, w, rule, prog, round, lastAcc, lastLoss, st, samples)
		}
		if st.Stop {
			res.Elapsed = now
			break
		}
	}
	finished = true
	if err := strat.Finish(ctx, w); err != nil {
		return nil, err
	}
	res.Collective = collectiveUsed(w, strat)
	if w.Rank == 0 {
		res.StopReason = reason
		if reason == "" {
			res.StopReason = "stopped by rank 0"
		}
	}
	if ev != nil {
		ev.Drain(ctx)
		drained := ev.Take()
		res.Evals = append(res.Evals, drained...)
		t0 := time.Now()
		acc, loss, err := opts.Eval(ctx, w.Params)
		if err != nil {
			return nil, fmt.Errorf("trainer: rank 0: evaluating the final model: %w", err)
		}
		last := first - 1
		if len(res.Records) > 0 {
			last = res.Records[len(res.Records)-1].Round
		}
		res.Evals = append(res.Evals, EvalResult{
			Round: last, GlobalRound: prog.Rounds, SnapshotTime: res.Elapsed, GlobalSamples: prog.GlobalSamples,
			Epochs: rule.EpochsDone(prog), Acc: acc, Loss: loss, EvalSeconds: time.Since(t0).Seconds(),
		})
		if opts.AfterEval != nil {
			for _, r := range res.Evals[len(res.Evals)-len(drained)-1:] {
				opts.AfterEval(r)
			}
		}
		res.FinalAcc, res.FinalLoss = acc, loss
		if byTarget && acc < cfg.TargetAcc {
			// The stop was decided on an earlier snapshot; the reason must not pass the final
			// model off as having reached the target.
			res.StopReason += fmt.Sprintf("; the final model, after round %d, scores %s", last+1, strconv.FormatFloat(acc, 'g', -1, 64))
		}
		for _, r := range res.Evals {
			if r.Err == nil {
				accByRound[r.Round] = r.Acc
			}
		}
		for i := range res.Records {
			if a, ok := accByRound[res.Records[i].Round]; ok {
				res.Records[i].Accuracy, res.Records[i].HasAccuracy = a, true
			}
		}
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "done: %s after %.1fs, %d rounds; final test accuracy %.4f (loss %.4f)\n",
				res.StopReason, res.Elapsed.Seconds(), last+1, acc, loss)
		}
	}
	return res, nil
}

// writeProgress prints one progress line: round, epochs, accuracy, samples/s, elapsed and a
// bar toward the nearest stop condition.
func writeProgress(out io.Writer, w *Worker, rule StopRule, p Progress, round int, acc, loss float64, st RoundStats, samples int64) {
	const width = 20
	f := rule.Fraction(p)
	n := int(f * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	accS := "  -  "
	if acc >= 0 {
		accS = fmt.Sprintf("%.3f", acc)
	}
	rate := 0.0
	if p.Elapsed > 0 {
		rate = float64(p.GlobalSamples) / p.Elapsed.Seconds()
	}
	trainLoss := st.Loss
	if st.GlobalLoss >= 0 {
		trainLoss = st.GlobalLoss
	}
	fmt.Fprintf(out, "progress: round %6d  epoch %5.2f  test-acc %s  train-loss %.4f  %7.0f samples/s  %6.1fs  [%s] %3.0f%%\n",
		round+1, rule.EpochsDone(p), accS, trainLoss, rate, p.Elapsed.Seconds(), bar, 100*f)
}

// roundExtras are the strategy-specific fields of a round record.
func roundExtras(st RoundStats) []metrics.Field {
	f := make([]metrics.Field, 0, 4)
	if st.Samples > 0 {
		f = append(f, metrics.Field{Key: "train_acc", Value: float64(st.Correct) / float64(st.Samples)})
	}
	if st.GlobalLoss >= 0 {
		f = append(f, metrics.Field{Key: "global_loss", Value: st.GlobalLoss})
	}
	f = append(f, metrics.Field{Key: "global_samples", Value: float64(st.GlobalSamples)})
	if st.Staleness > 0 {
		f = append(f, metrics.Field{Key: "staleness", Value: float64(st.Staleness)})
	}
	return append(f, st.Extra...)
}
