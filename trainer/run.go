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
	"github.com/hetsync/hetsync/transport"
)

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

// Run trains w with strat until all ranks agree to stop (see stop.go for how), with the round
// loop's options (Eval, TrainSize, Progress, Checkpoint and the hooks; the ones that build
// the worker are Train's, used before). It starts with
// a barrier that checks that every rank holds the same configuration (agree.go) and gives
// every rank rank 0's parameters (start.go). Rank 0 decides
// the stop, evaluates snapshots on its own goroutine and prints progress; every rank records
// one RoundRecord per round.
//
// Its phases are loop's methods, in the order Run calls them: start (agree, share the start,
// start the strategy), resume (from a checkpoint), rounds (vote, round, checkpoint, evaluate,
// report progress, until the agreed stop), finish (the strategy's teardown) and finalEval.
func Run(ctx context.Context, w *Worker, strat Strategy, opts TrainOptions) (_ *Result, err error) {
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = time.Second
	}
	l, err := newLoop(w, strat, opts)
	if err != nil {
		return nil, err
	}
	evalCtx, cancelEval := context.WithCancel(ctx)
	defer cancelEval()
	if w.Rank == 0 && opts.Eval != nil {
		l.ev = newEvaluator(evalCtx, opts.Eval, len(w.Params))
		if opts.AfterEval != nil {
			defer func() {
				if err != nil {
					l.recordFinishedEvals()
				}
			}()
		}
	}
	if err := l.start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if !l.finished {
			_ = strat.Finish(ctx, w)
		}
	}()
	if err := l.resume(ctx); err != nil {
		return nil, err
	}
	if err := l.rounds(ctx); err != nil {
		return nil, err
	}
	if err := l.finish(ctx); err != nil {
		return nil, err
	}
	if err := l.finalEval(ctx); err != nil {
		return nil, err
	}
	return l.res, nil
}

// loop is one rank's Run: what its phases share.
type loop struct {
	w     *Worker
	strat Strategy
	opts  TrainOptions
	rule  StopRule
	cp    Checkpointer
	ev    *evaluator // rank 0 with an EvalFunc
	late  *lateWaits
	res   *Result

	prog      Progress
	first     int // the first round (a resumed run's checkpoint round)
	resumed   time.Duration
	begin     time.Time // the rounds' clock: time_s counts from here
	lastStats transport.Stats
	lastSent  metrics.LinkBytes // linkSent at the end of the previous round
	lastEval  time.Duration
	lastPrint time.Duration
	lastCkpt  time.Duration
	samples   int64
	lastAcc   float64
	lastLoss  float64
	reason    string // rank 0: why the job stops, once decided
	byTarget  bool   // reason is the target accuracy, reached by an earlier snapshot
	finished  bool   // the strategy's Finish has run
}

func newLoop(w *Worker, strat Strategy, opts TrainOptions) (*loop, error) {
	cfg := w.Cfg
	cp, err := checkpointer(strat, opts.Checkpoint)
	if err != nil {
		return nil, err
	}
	return &loop{w: w, strat: strat, opts: opts, cp: cp, res: &Result{FinalAcc: -1, FinalLoss: -1}, lastAcc: -1, lastLoss: -1,
		rule: StopRule{TargetAcc: cfg.TargetAcc, Epochs: cfg.Epochs, MaxTime: cfg.MaxTime, MaxRounds: cfg.MaxRounds, TrainSize: opts.TrainSize}}, nil
}

// recordFinishedEvals hands the evaluations that finished before a failure to AfterEval: they
// are measurements of the run all the same (a resumed run keeps those of rounds up to its
// checkpoint). One still running is not waited for, so that the failure is reported at once.
func (l *loop) recordFinishedEvals() {
	for _, r := range l.ev.Take() {
		if r.Err == nil {
			l.opts.AfterEval(r)
		}
	}
}

// start aligns the ranks' clocks (every time_s then counts from nearly the same instant),
// checks that they share the configuration, starts every rank from rank 0's parameters
// (start.go), shares the per-rank checkpoint plan and starts the strategy.
func (l *loop) start(ctx context.Context) error {
	w := l.w
	if err := agreeStart(ctx, w, l.opts.Checkpoint.Resume); err != nil {
		return err
	}
	if err := broadcastParams(ctx, w); err != nil {
		return err
	}
	if _, ok := l.strat.(PerRankCheckpointer); ok {
		var err error
		if l.opts.Checkpoint, err = sharePerRankPlan(ctx, w, l.opts.Checkpoint); err != nil {
			return err
		}
		if l.cp, err = checkpointer(l.strat, l.opts.Checkpoint); err != nil {
			return err
		}
	}
	// Heterogeneity is the worker's, whatever the strategy: compute-mode stragglers count
	// their windows from here, as the rounds' clocks do.
	applyComputeStragglers(w)
	l.late = startLateWaits(w.Comm)
	if err := l.strat.Start(ctx, w); err != nil {
		return err
	}
	l.lastStats = w.Endpoint.Stats()
	l.lastSent = linkSent(w)
	return nil
}

// resume restores the checkpoint the run continues, if any, and evaluates its round when
// that was due and not evaluated; then it starts the rounds' clock, which a resumed run
// continues from the checkpoint, as its rounds do.
func (l *loop) resume(ctx context.Context) error {
	if ck := l.opts.Checkpoint.Resume; ck != nil {
		if err := restoreCheckpoint(l.w, l.cp, ck, l.opts.Checkpoint.File); err != nil {
			return err
		}
		l.first, l.resumed = ck.Round, ck.Elapsed
		l.prog.Rounds, l.prog.GlobalSamples = ck.GlobalRounds, ck.GlobalSamples
		if err := l.evalCheckpoint(ctx, ck); err != nil {
			return err
		}
	}
	l.begin = l.w.Now().Add(-l.resumed)
	l.lastEval, l.lastCkpt = l.resumed, l.resumed
	l.prog.BestAcc = -1
	return nil
}

// evalCheckpoint evaluates the checkpoint's round when it was due for evaluation and the run
// being continued holds none (see CheckpointOptions.Evaluated). The restored parameters are
// the snapshot that evaluation would have seen. It runs before the first round, on the
// evaluator's function while the evaluator is still idle.
func (l *loop) evalCheckpoint(ctx context.Context, ck *Checkpoint) error {
	cfg := l.w.Cfg
	if l.ev == nil || l.opts.Checkpoint.Evaluated || cfg.Eval.Rounds <= 0 || ck.Round%cfg.Eval.Rounds != 0 {
		return nil
	}
	t0 := time.Now()
	r := EvalResult{Round: ck.Round - 1, GlobalRound: ck.GlobalRounds, SnapshotTime: ck.Elapsed,
		GlobalSamples: ck.GlobalSamples, Epochs: l.rule.EpochsDone(l.prog)}
	r.Acc, r.Loss, r.Err = l.opts.Eval(ctx, l.w.Params)
	if r.Err != nil {
		return fmt.Errorf("trainer: rank 0: evaluating the round-%d snapshot restored from %s: %w", r.Round, l.opts.Checkpoint.File, r.Err)
	}
	r.EvalSeconds = time.Since(t0).Seconds()
	l.ev.Counted(r)
	l.res.Evals = append(l.res.Evals, r)
	if l.opts.AfterEval != nil {
		l.opts.AfterEval(r)
	}
	l.lastAcc, l.lastLoss = r.Acc, r.Loss
	return nil
}

// rounds runs rounds until the agreed stop: rank 0's vote, the strategy's round and its
// record, then checkpoint, evaluation and progress.
func (l *loop) rounds(ctx context.Context) error {
	for round := l.first; ; round++ {
		st, now, err := l.round(ctx, round, l.vote())
		if err != nil {
			return err
		}
		if l.cp != nil && !st.Stop {
			if err := checkpointAfter(ctx, l.w, l.cp, l.opts.Checkpoint, round, st, now, &l.lastCkpt); err != nil {
				return err
			}
		}
		if l.opts.AfterRound != nil {
			l.opts.AfterRound(&l.res.Records[len(l.res.Records)-1])
		}
		if err := l.evaluate(round, st, now); err != nil {
			return err
		}
		l.progress(round, st, now)
		if st.Stop {
			l.res.Elapsed = now
			return nil
		}
	}
}

// vote is rank 0's stop vote for the coming round (false on the other ranks). It judges the
// progress this round will have made, so that the vote rides on the round that reaches a
// round or epoch bound (N rounds run, not N+1).
func (l *loop) vote() bool {
	if l.w.Rank != 0 {
		return false
	}
	l.prog.Elapsed = l.w.Now().Sub(l.begin)
	if l.ev != nil {
		l.prog.BestAcc, l.prog.BestRound = l.ev.Best()
	}
	if l.reason == "" {
		next := l.prog
		if a, ok := l.strat.(asynchronous); ok && a.Asynchronous() {
			// One push: a global round (size updates) is reached by the updates
			// themselves, so --max-rounds N means at least N·size updates.
			next.GlobalSamples += int64(l.w.Cfg.Batch)
		} else {
			next.Rounds++
			next.GlobalSamples += int64(l.w.Size) * int64(l.w.Cfg.Batch)
		}
		if stop, why := l.rule.Decide(next); stop {
			l.reason, l.byTarget = why, l.rule.ReachedTarget(next)
		}
		if l.opts.Failed != nil {
			if err := l.opts.Failed(); err != nil {
				l.reason = "stopped: " + err.Error()
			}
		}
	}
	return l.reason != ""
}

// round runs the strategy's round and records it; now is the training time at its end.
func (l *loop) round(ctx context.Context, round int, vote bool) (RoundStats, time.Duration, error) {
	roundStart := time.Now()
	st, err := l.strat.Round(ctx, l.w, vote)
	if err != nil {
		return st, 0, err
	}
	return st, l.record(round, st, roundStart), nil
}

// record adds round's record, which began at roundStart, to the result and the progress; it
// returns the training time at its end.
func (l *loop) record(round int, st RoundStats, roundStart time.Time) time.Duration {
	w := l.w
	w.Timeline.Span(collective.TrackUser, "round", roundStart, time.Now(), "round", round, "local_steps", st.LocalSteps, "wait_s", st.Wait.Seconds())
	now := w.Now().Sub(l.begin)
	stats := w.Endpoint.Stats()
	rec := metrics.RoundRecord{
		Rank: w.Rank, Round: round, TimeS: now.Seconds(), Samples: st.Samples, LocalSteps: st.LocalSteps,
		ComputeS: st.Compute.Seconds(), CommS: st.Comm.Seconds(), WaitS: st.Wait.Seconds(),
		BytesSent: int64(stats.BytesSent - l.lastStats.BytesSent), BytesRecv: int64(stats.BytesRecv - l.lastStats.BytesRecv),
		Loss: st.Loss,
	}
	rec.LateRank, rec.LateWaitS = l.late.round()
	rec.Extra = roundExtras(st)
	sent := linkSent(w)
	rec.Sent, l.lastSent = sent.Sub(l.lastSent), sent
	l.lastStats = stats
	l.samples += int64(st.Samples)
	l.prog.Rounds, l.prog.GlobalSamples = st.GlobalRounds, st.GlobalSamples
	l.res.Records = append(l.res.Records, rec)
	return now
}

// evaluate offers rank 0's model after round when an evaluation is due, and takes the
// evaluations that finished.
func (l *loop) evaluate(round int, st RoundStats, now time.Duration) error {
	if l.ev == nil || st.Stop {
		return nil
	}
	cfg := l.w.Cfg
	due := (cfg.Eval.Rounds > 0 && (round+1)%cfg.Eval.Rounds == 0) ||
		(cfg.Eval.Interval > 0 && now-l.lastEval >= cfg.Eval.Interval)
	if due {
		l.lastEval = now
		params := l.w.Params
		if g, ok := l.strat.(globalModel); ok {
			params = g.GlobalModel()
		}
		l.ev.Offer(params, EvalResult{Round: round, GlobalRound: st.GlobalRounds, SnapshotTime: now, GlobalSamples: st.GlobalSamples, Epochs: l.rule.EpochsDone(l.prog)})
	}
	for _, r := range l.ev.Take() {
		l.res.Evals = append(l.res.Evals, r)
		if l.opts.AfterEval != nil {
			l.opts.AfterEval(r)
		}
		if r.Err != nil {
			return fmt.Errorf("trainer: rank 0: evaluating the round-%d snapshot: %w", r.Round, r.Err)
		}
		l.lastAcc, l.lastLoss = r.Acc, r.Loss
	}
	return nil
}

// globalModel is implemented by strategies whose ranks hold, after a round, a model of
// their own beside the global one every rank shares (ESync with overlapping rounds):
// evaluation takes the global model.
type globalModel interface{ GlobalModel() []float32 }

// progress prints rank 0's progress line when one is due, and after the last round.
func (l *loop) progress(round int, st RoundStats, now time.Duration) {
	if l.w.Rank != 0 || l.opts.Progress == nil || (now-l.lastPrint < l.opts.ProgressEvery && !st.Stop) {
		return
	}
	l.lastPrint = now
	l.prog.Elapsed = now
	if l.ev != nil {
		l.prog.BestAcc, l.prog.BestRound = l.ev.Best()
	}
	writeProgress(l.opts.Progress, l.w, l.rule, l.prog, round, l.lastAcc, l.lastLoss, st, l.samples)
}

// finish tears the strategy down after the agreed stop and says what the rounds ran over
// and, on rank 0, why they stopped.
func (l *loop) finish(ctx context.Context) error {
	l.finished = true
	if err := l.strat.Finish(ctx, l.w); err != nil {
		return err
	}
	l.res.Collective = collectiveUsed(l.w, l.strat)
	if l.w.Rank == 0 {
		l.res.StopReason = l.reason
		if l.reason == "" {
			l.res.StopReason = "stopped by rank 0"
		}
	}
	return nil
}

// finalEval, on rank 0 with an evaluator, waits for the evaluations still running, evaluates
// the final model, and gives each round record the accuracy of its snapshot.
func (l *loop) finalEval(ctx context.Context) error {
	if l.ev == nil {
		return nil
	}
	res := l.res
	l.ev.Drain(ctx)
	drained := l.ev.Take()
	res.Evals = append(res.Evals, drained...)
	t0 := time.Now()
	acc, loss, err := l.opts.Eval(ctx, l.w.Params)
	if err != nil {
		return fmt.Errorf("trainer: rank 0: evaluating the final model: %w", err)
	}
	last := l.first - 1
	if len(res.Records) > 0 {
		last = res.Records[len(res.Records)-1].Round
	}
	res.Evals = append(res.Evals, EvalResult{
		Round: last, GlobalRound: l.prog.Rounds, SnapshotTime: res.Elapsed, GlobalSamples: l.prog.GlobalSamples,
		Epochs: l.rule.EpochsDone(l.prog), Acc: acc, Loss: loss, EvalSeconds: time.Since(t0).Seconds(),
	})
	if l.opts.AfterEval != nil {
		for _, r := range res.Evals[len(res.Evals)-len(drained)-1:] {
			l.opts.AfterEval(r)
		}
	}
	res.FinalAcc, res.FinalLoss = acc, loss
	if l.byTarget && acc < l.w.Cfg.TargetAcc {
		// The stop was decided on an earlier snapshot; the reason must not pass the final
		// model off as having reached the target.
		res.StopReason += fmt.Sprintf("; the final model, after round %d, scores %s", last+1, strconv.FormatFloat(acc, 'g', -1, 64))
	}
	accByRound := map[int]float64{}
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
	if l.opts.Progress != nil {
		fmt.Fprintf(l.opts.Progress, "done: %s after %.1fs, %d rounds; final test accuracy %.4f (loss %.4f)\n",
			res.StopReason, res.Elapsed.Seconds(), last+1, acc, loss)
	}
	return nil
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
