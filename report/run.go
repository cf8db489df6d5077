package report

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/metrics"
)

// Run is one loaded run directory.
type Run struct {
	// Name is the directory's base name (the experiment's run name).
	Name string
	Dir  string
	// Setup is what config.json says about the run.
	Setup Setup
	// Summary is metrics.Summarize over the run's records.
	Summary metrics.Summary
	// Evals are the evaluations in file order.
	Evals []metrics.EvalRecord
	// Rounds are the round records, by rank then round.
	Rounds []metrics.RoundRecord
	// EndedEarly says where and why the run ended before its stop rule; nil when it did not.
	EndedEarly *metrics.EarlyEnd
	// seedKey is the configuration less its seed (seedKey): equal keys are repeats.
	seedKey string
}

// Setup is the part of config.json a report needs. Unknown keys are ignored, so runs of any
// strategy load.
type Setup struct {
	Strategy   string          `json:"strategy"`
	Collective string          `json:"collective"`
	Model      string          `json:"model"`
	Shard      string          `json:"shard"`
	Ranks      int             `json:"ranks"`
	Seed       uint64          `json:"seed"`
	TargetAcc  float64         `json:"target_acc"`
	Slowdown   []float64       `json:"slowdown"`
	StepSleep  []time.Duration `json:"step_sleep"`
	Stragglers json.RawMessage `json:"stragglers"`
}

// Hetero describes the run's injected heterogeneity ("slowdown 1,1,2,4", "sleep 0s,0s,10ms",
// "none"), with the stragglers when any.
func (s Setup) Hetero() string {
	var parts []string
	if len(s.Slowdown) > 0 {
		f := make([]string, len(s.Slowdown))
		for i, v := range s.Slowdown {
			f[i] = strconv.FormatFloat(v, 'g', -1, 64)
		}
		parts = append(parts, "slowdown "+strings.Join(f, ","))
	}
	if len(s.StepSleep) > 0 {
		f := make([]string, len(s.StepSleep))
		for i, d := range s.StepSleep {
			f[i] = d.String()
		}
		parts = append(parts, "sleep "+strings.Join(f, ","))
	}
	if st := stragglerText(s.Stragglers); st != "" {
		parts = append(parts, st)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// scenario is what must be equal for two runs to be compared: everything but the strategy
// (the seed too, so that each seed of a repeated experiment has its own baseline).
func (s Setup) scenario() string {
	return fmt.Sprintf("%s|%d|%d|%s|%s|%s", s.Model, s.Ranks, s.Seed, s.Shard, s.Hetero(), strings.TrimSpace(string(s.Stragglers)))
}

// LoadRun reads a run directory (config.json, metrics.jsonl, eval.jsonl).
func LoadRun(dir string) (Run, error) {
	cfg, rounds, evals, err := metrics.LoadRun(dir)
	if err != nil {
		return Run{}, fmt.Errorf("report: run %s: %w", dir, err)
	}
	var setup Setup
	if err := json.Unmarshal(cfg, &setup); err != nil {
		return Run{}, fmt.Errorf("report: %s: %w", filepath.Join(dir, metrics.ConfigFile), err)
	}
	if setup.Ranks == 0 {
		setup.Ranks = len(setup.Slowdown)
	}
	if err := checkRanks(dir, setup.Ranks, rounds); err != nil {
		return Run{}, err
	}
	ending := metrics.Ending(dir, rounds)
	if len(rounds) == 0 {
		// Every number of the report would be a zero that no run measured.
		why := ""
		if ending != nil {
			why = "; it " + ending.String()
		}
		return Run{}, fmt.Errorf("report: run %s recorded no rounds (%s holds none and %s/ none): nothing to report%s", dir, metrics.MetricsFile, metrics.RanksDir, why)
	}
	s := metrics.Summarize(json.RawMessage(cfg), rounds, evals)
	if setup.Ranks == 0 {
		setup.Ranks = s.Ranks
	}
	name := filepath.Base(filepath.Clean(dir))
	return Run{Name: name, Dir: dir, Setup: setup, Summary: s, Evals: evals, Rounds: rounds, EndedEarly: ending, seedKey: seedKey(name, cfg)}, nil
}

// checkRanks refuses records of ranks the run did not have: the report draws a series per
// rank, so a rank far beyond the job's size (a corrupt or hand-edited file) would cost time
// and memory in proportion to it. The job's size is config.json's, or without one the number
// of distinct ranks in the records.
func checkRanks(dir string, ranks int, rounds []metrics.RoundRecord) error {
	limit := ranks
	if limit <= 0 {
		seen := map[int]struct{}{}
		for _, r := range rounds {
			seen[r.Rank] = struct{}{}
		}
		limit = len(seen)
	}
	for _, r := range rounds {
		if r.Rank >= limit {
			return fmt.Errorf("report: run %s: %s has a record of rank %d (round %d) but the run had %d ranks",
				dir, metrics.MetricsFile, r.Rank, r.Round, limit)
		}
	}
	return nil
}

// LoadRuns loads every directory; run names (directory base names) must be distinct.
func LoadRuns(dirs []string) ([]Run, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("report: no run directories given")
	}
	runs := make([]Run, 0, len(dirs))
	seen := map[string]string{}
	for _, d := range dirs {
		r, err := LoadRun(d)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[r.Name]; dup {
			return nil, fmt.Errorf("report: runs %s and %s have the same name %q; give run directories distinct names", prev, d, r.Name)
		}
		seen[r.Name] = d
		runs = append(runs, r)
	}
	return runs, nil
}

// stragglerText describes config.json's stragglers ("stragglers 1,2 +30ms at 3s,10s for 5s"),
// "" when there are none.
func stragglerText(raw json.RawMessage) string {
	var st struct {
		Ranks []int           `json:"ranks"`
		Delay time.Duration   `json:"delay"`
		At    []time.Duration `json:"at"`
		For   time.Duration   `json:"for"`
		Mode  string          `json:"mode"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil || len(st.Ranks) == 0 || len(st.At) == 0 {
		return ""
	}
	ranks := make([]string, len(st.Ranks))
	for i, r := range st.Ranks {
		ranks[i] = strconv.Itoa(r)
	}
	at := make([]string, len(st.At))
	for i, d := range st.At {
		at[i] = d.String()
	}
	out := fmt.Sprintf("stragglers %s +%v at %s for %v", strings.Join(ranks, ","), st.Delay, strings.Join(at, ","), st.For)
	if st.Mode != "" {
		out += " (" + st.Mode + ")"
	}
	return out
}
