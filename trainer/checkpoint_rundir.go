package trainer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hetsync/hetsync/trainer/metrics"
)

// ContinueRun writes a resumed run into the run directory dir that it continues. What dir
// already recorded before the checkpoint (rounds before round, evaluations of global rounds up
// to it) is kept; what it recorded after the checkpoint, the resumed run repeated, so those
// records are dropped and every round appears once. The new files are written in a directory
// beside them and renamed over the old ones one by one, each replacement atomic. A dir with
// no records yet (a run killed before it wrote any) reads as empty.
func ContinueRun(dir string, config any, round int, all []metrics.RoundRecord, evals []EvalResult, ran Ran) (metrics.Summary, error) {
	oldRounds, oldEvals, err := recordedBefore(dir, round)
	if err != nil {
		return metrics.Summary{}, err
	}
	rounds := append(oldRounds, all...)
	ev := append(oldEvals, evals...)
	tmp, err := os.MkdirTemp(dir, ".resume-")
	if err != nil {
		return metrics.Summary{}, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	run := filepath.Join(tmp, "run")
	sum, err := WriteRun(run, config, rounds, ev, ran)
	if err != nil {
		return sum, err
	}
	if err := os.MkdirAll(filepath.Join(dir, metrics.LogsDir), 0o755); err != nil {
		return sum, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	for _, f := range []string{metrics.ConfigFile, metrics.MetricsFile, metrics.EvalFile, metrics.SummaryFile} {
		if err := os.Rename(filepath.Join(run, f), filepath.Join(dir, f)); err != nil {
			return sum, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
		}
	}
	return sum, nil
}

// recordedBefore reads dir's round records of rounds before round and its evaluations of
// global rounds up to round.
func recordedBefore(dir string, round int) ([]metrics.RoundRecord, []EvalResult, error) {
	if _, err := os.Stat(filepath.Join(dir, metrics.MetricsFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	_, rounds, evals, err := metrics.LoadRun(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: continuing run %s: %w", dir, err)
	}
	var keep []metrics.RoundRecord
	for _, r := range rounds {
		if r.Round < round {
			keep = append(keep, r)
		}
	}
	var ev []EvalResult
	for _, e := range evals {
		if e.Round <= round {
			ev = append(ev, EvalResult{Round: e.Round, GlobalRound: e.Round, SnapshotTime: time.Duration(e.TimeS * float64(time.Second)), Acc: e.Accuracy, Loss: e.Loss})
		}
	}
	return keep, ev, nil
}
