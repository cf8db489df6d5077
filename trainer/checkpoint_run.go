package trainer

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// Checkpointer is implemented by strategies that can be checkpointed: at the end of every
// round each rank holds the same model, optimizer state and strategy state, and has taken
// the same number of local steps, so rank 0's state alone is a consistent cut of the whole
// job and one file written by rank 0 restores every rank (bitwise, for ssgd).
type Checkpointer interface {
	// CheckpointState encodes the strategy's own state after a round.
	CheckpointState(w *Worker) ([]byte, error)
	// RestoreState loads what CheckpointState encoded, after Start, on every rank; from is
	// the checkpoint's header (its world size may differ from w.Size when Resizable).
	RestoreState(w *Worker, state []byte, from *CheckpointHeader) error
	// Resizable reports whether the state carries over to a job of another number of ranks.
	Resizable() bool
}

// noCheckpoint is implemented by strategies without Checkpointer: NoCheckpoint says which
// of their state differs between ranks.
type noCheckpoint interface{ NoCheckpoint() string }

// cannotCheckpoint is why strat, which has no Checkpointer, is refused --checkpoint-every and
// --resume.
func cannotCheckpoint(strat Strategy) error {
	why := "its ranks do not hold one shared state after a round"
	if n, ok := strat.(noCheckpoint); ok {
		why = n.NoCheckpoint()
	}
	return fmt.Errorf("trainer: --sync %s cannot be checkpointed: %s; a checkpoint is either one file written by rank 0, "+
		"when every rank holds the same state after each round (ssgd), or one part per rank of the same round, "+
		"when the ranks end every round together (esync)", strat.Name(), why)
}

// Checkpointable says why the strategy cfg names cannot be checkpointed, or nil when it can.
func (r *Registry) Checkpointable(cfg *Config) error {
	c := *cfg // New fills defaults in; the caller's configuration stays as it is
	strat, err := r.New(&c)
	if err != nil {
		return err
	}
	_, err = checkpointer(strat, CheckpointOptions{Resume: &Checkpoint{}})
	return err
}

// CheckpointResizable says why the strategy cfg names cannot continue its checkpoint on
// another number of ranks, or nil when it can (or writes none, which Checkpointable says).
func (r *Registry) CheckpointResizable(cfg *Config) error {
	c := *cfg
	strat, err := r.New(&c)
	if err != nil {
		return err
	}
	cp, ok := strat.(Checkpointer)
	if !ok || cp.Resizable() {
		return nil
	}
	if _, perRank := cp.(PerRankCheckpointer); perRank {
		return fmt.Errorf("--sync %s cannot continue a checkpoint on another number of ranks: each rank's part holds that rank's own momentum and place in its own shard", strat.Name())
	}
	return fmt.Errorf("--sync %s cannot continue a checkpoint on another number of ranks", strat.Name())
}

// DataSeeker is implemented by models that can move to a position in their data: after
// SeekSteps(n), the next Step takes the batch it would have taken after n steps from the
// start. Resuming from a checkpoint needs it. NewBatchModel's models implement it.
type DataSeeker interface {
	SeekSteps(steps uint64) error
}

// SeekSteps moves the batches to their position after steps batches: through the batches'
// own SeekSteps when they have one, else by drawing and dropping that many.
func (m *batchModel) SeekSteps(steps uint64) error {
	if s, ok := m.data.(DataSeeker); ok {
		return s.SeekSteps(steps)
	}
	for i := uint64(0); i < steps; i++ {
		if _, _, err := m.data.Next(); err != nil {
			return fmt.Errorf("skipping to batch %d: %w", steps, err)
		}
	}
	return nil
}

// CheckpointOptions say where rank 0 writes checkpoints and how often, and what a run
// resumes from.
type CheckpointOptions struct {
	// Dir is where rank 0 writes CheckpointFile; "" writes none. For a PerRankCheckpointer
	// every rank writes its part into rank 0's Dir, with rank 0's Every (Run sends them).
	Dir string
	// Every is the period: every Rounds rounds or every Interval of training time. Zero
	// writes none.
	Every EvalEvery
	// Resume, when set, is the checkpoint every rank continues from; File names it in errors.
	Resume *Checkpoint
	File   string
	// Evaluated says that the run being continued already holds rank 0's evaluation of
	// Resume's round. Without it, a resumed rank 0 whose evaluation schedule (Config.Eval's
	// Rounds) falls on that round evaluates the restored parameters before its first round:
	// the evaluation the interrupted run offered after its checkpoint is lost with it when a
	// rank fails before the evaluation is recorded, and the resumed run would otherwise leave
	// a hole in the evaluations exactly where it resumed.
	Evaluated bool
}

func (o CheckpointOptions) enabled() bool {
	return o.Resume != nil || (o.Dir != "" && (o.Every.Rounds > 0 || o.Every.Interval > 0))
}

// due reports whether rank 0 writes a checkpoint after round (0-based) at training time now,
// the previous one written at last.
func (o CheckpointOptions) due(round int, now, last time.Duration) bool {
	if o.Dir == "" {
		return false
	}
	return (o.Every.Rounds > 0 && (round+1)%o.Every.Rounds == 0) || (o.Every.Interval > 0 && now-last >= o.Every.Interval)
}

// checkpointer is strat's Checkpointer, or the error saying why it has none, when opts
// checkpoint or resume.
func checkpointer(strat Strategy, opts CheckpointOptions) (Checkpointer, error) {
	if !opts.enabled() {
		return nil, nil
	}
	c, ok := strat.(Checkpointer)
	if !ok {
		return nil, cannotCheckpoint(strat)
	}
	return c, nil
}

// restoreCheckpoint puts w and strat where the checkpoint ck left the job: the model, the
// optimizer's state, the strategy's state and this rank's data position.
func restoreCheckpoint(w *Worker, cp Checkpointer, ck *Checkpoint, file string) error {
	if err := ck.Matches(file, w.Cfg, w.Size, len(w.Params), cp.Resizable()); err != nil {
		return err
	}
	_, perRank := cp.(PerRankCheckpointer)
	switch {
	case perRank && ck.Rank == nil:
		return fmt.Errorf("trainer: rank %d: checkpoint %s is one file for the whole job, and --sync %s resumes from one part per rank", w.Rank, file, w.Cfg.Strategy)
	case !perRank && ck.Rank != nil:
		return fmt.Errorf("trainer: rank %d: checkpoint %s is rank %d's part, and --sync %s resumes from one file for the whole job", w.Rank, file, *ck.Rank, w.Cfg.Strategy)
	case perRank && *ck.Rank != w.Rank:
		return fmt.Errorf("trainer: rank %d: checkpoint %s is rank %d's part", w.Rank, file, *ck.Rank)
	}
	seeker, ok := w.Model.(DataSeeker)
	if !ok {
		return fmt.Errorf("trainer: rank %d: resuming from %s needs the model to move to its data position (implement trainer.DataSeeker)", w.Rank, file)
	}
	if err := seeker.SeekSteps(ck.Steps); err != nil {
		return fmt.Errorf("trainer: rank %d: resuming from %s: %w", w.Rank, file, err)
	}
	copy(w.Params, ck.Params)
	if err := w.Opt.LoadState(ck.OptimizerState, len(w.Params)); err != nil {
		return fmt.Errorf("trainer: rank %d: resuming from %s: %w", w.Rank, file, err)
	}
	w.steps = ck.Steps
	if err := cp.RestoreState(w, ck.State, &ck.CheckpointHeader); err != nil {
		return fmt.Errorf("trainer: rank %d: resuming from %s: %w", w.Rank, file, err)
	}
	return nil
}

// checkpointAfter writes the checkpoint after round (0-based) at training time now when one
// is due, the previous one written at *last: rank 0's file, or every rank's part.
func checkpointAfter(ctx context.Context, w *Worker, cp Checkpointer, o CheckpointOptions, round int, st RoundStats, now time.Duration, last *time.Duration) error {
	if _, ok := cp.(PerRankCheckpointer); !ok {
		if w.Rank != 0 || !o.due(round, now, *last) {
			return nil
		}
		*last = now
		return saveCheckpoint(o.Dir, w, cp, round, st, now)
	}
	if o.Dir == "" {
		return nil
	}
	due := o.due(round, now, *last)
	if o.Every.Interval > 0 {
		var err error
		if due, err = agreeCheckpointDue(ctx, w, due); err != nil {
			return err
		}
	}
	if !due {
		return nil
	}
	*last = now
	return saveRankCheckpoint(ctx, o.Dir, w, cp, round, st, now)
}

// saveCheckpoint writes rank 0's state after round (0-based) into dir.
func saveCheckpoint(dir string, w *Worker, cp Checkpointer, round int, st RoundStats, elapsed time.Duration) error {
	state, err := cp.CheckpointState(w)
	if err != nil {
		return fmt.Errorf("trainer: rank 0: checkpoint after round %d: %w", round, err)
	}
	if err := WriteCheckpoint(dir, newCheckpoint(w, state, round, st, elapsed)); err != nil {
		return fmt.Errorf("rank 0: after round %d: %w", round, err)
	}
	return nil
}

// newCheckpoint is w's checkpoint after round (0-based), with the strategy's state.
func newCheckpoint(w *Worker, state []byte, round int, st RoundStats, elapsed time.Duration) *Checkpoint {
	return &Checkpoint{
		CheckpointHeader: CheckpointHeader{
			Strategy: w.Cfg.Strategy, WorldSize: w.Size, Seed: w.Cfg.Seed, Round: round + 1, Steps: w.steps,
			GlobalRounds: st.GlobalRounds, GlobalSamples: st.GlobalSamples, Elapsed: elapsed, Optimizer: w.Cfg.optimizerName(),
		},
		Params: w.Params, OptimizerState: w.Opt.AppendState(nil), State: state,
	}
}

// CheckpointPath is the checkpoint file of run directory dir.
func CheckpointPath(dir string) string { return filepath.Join(dir, CheckpointFile) }
