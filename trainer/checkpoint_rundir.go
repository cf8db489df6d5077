package trainer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/hetsync/hetsync/metrics"
)

// RewindRun prepares the run directory dir, which a run resumed from the checkpoint of round
// continues, and returns the round records and the evaluations it keeps. What dir recorded before the checkpoint
// (rounds before round, evaluations of global rounds up to it) is kept; what it recorded
// after, the resumed run repeats, so those records are dropped and every round appears once.
// The kept evaluations and each rank's kept rounds (ranks/rank-N.jsonl) are rewritten in place,
// each file replaced atomically, so that a resumed run that is interrupted again still leaves
// every round it measured; metrics.jsonl is emptied, to be written at the end from the kept
// records and the resumed run's (liveRun.finish), and summary.json is removed until then.
// A dir with no records yet (a run killed before it wrote any) keeps nothing.
func RewindRun(dir string, round int) ([]metrics.RoundRecord, []metrics.EvalRecord, error) {
	if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	_, rounds, evals, err := metrics.LoadRun(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	keep := slices.DeleteFunc(rounds, func(r metrics.RoundRecord) bool { return r.Round >= round })
	ev := slices.DeleteFunc(evals, func(e metrics.EvalRecord) bool { return e.Round > round })

	if err := rewriteRecords(filepath.Join(dir, metrics.EvalFile), func(w *metrics.Writer) error {
		for i := range ev {
			if err := w.WriteEval(&ev[i]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, metrics.RanksDir, "rank-*.jsonl"))
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	byRank := map[string][]metrics.RoundRecord{}
	for _, r := range keep {
		p := metrics.RankRecordsPath(dir, r.Rank)
		byRank[p] = append(byRank[p], r)
	}
	for _, p := range old {
		if _, ok := byRank[p]; !ok {
			byRank[p] = nil
		}
	}
	for p, recs := range byRank {
		if err := rewriteRecords(p, func(w *metrics.Writer) error {
			for i := range recs {
				if err := w.WriteRound(&recs[i]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
		}
	}
	if err := os.Truncate(filepath.Join(dir, metrics.MetricsFile), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	if err := os.Remove(filepath.Join(dir, metrics.SummaryFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	return keep, ev, nil
}

// rewriteRecords replaces the records file at path atomically with what write writes.
func rewriteRecords(path string, write func(*metrics.Writer) error) error {
	return metrics.ReplaceFile(path, func(w io.Writer) error { return write(metrics.NewWriter(w)) })
}
