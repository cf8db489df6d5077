package command

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
)

// What a resumed run may change. A run is its training trajectory: what defines it (the
// strategy and its options, the model, the data split, the seed, the batch, the optimizer,
// the injected heterogeneity) must be given as the run had it, or the run continued would be
// another experiment under the first one's name. What only says how far the run goes, how
// often it is measured or saved, and how the ranks talk may change; the number of ranks may
// change where the strategy's checkpoint carries over (trainer.Registry.CheckpointResizable).
// config.json then records what the resumed run used, and under "resumed" when and after
// which round each resume started and what it changed.

// resumeFixed are config.json's keys a resumed run must keep, with the flag that sets each.
var resumeFixed = []struct{ key, flag string }{
	{"strategy", "--sync"}, {"model", "--model"}, {"shard", "--shard"}, {"seed", "--seed"},
	{"batch", "--batch"}, {"lr", "--lr"}, {"optimizer", "--optimizer"}, {"momentum", "--momentum"}, {"dampening", "--dampening"},
	{"nesterov", "--nesterov"}, {"beta1", "--beta1"}, {"beta2", "--beta2"}, {"eps", "--eps"}, {"weight_decay", "--weight-decay"},
	{"grad_reduction", "--grad-reduction"}, {"slowdown", "--slowdown"}, {"step_sleep", "--step-sleep"},
	{"slowdown_base", "--slowdown-base"}, {"stragglers", "--stragglers"},
}

// resumeNotes are config.json's keys that record a run's history rather than its settings:
// a resume keeps them.
var resumeNotes = []string{"started", "resumed", "sched"}

// resumeEntry is one resume of a run, as config.json's "resumed" lists them.
type resumeEntry struct {
	Started string `json:"started"`
	// Round is the checkpoint's round: the first the resumed run trained.
	Round int `json:"round"`
	Ranks int `json:"ranks"`
	// Changed lists the settings the resume changed ("max_rounds: 30 -> 50").
	Changed []string `json:"changed,omitempty"`
}

// recordResume checks a resume of the run in dir with now, the record of the resumed job,
// against the run's config.json and checkpoint, before any rank trains: a setting the run
// must keep that differs is an error naming its flag and both values, and so is a --max-rounds
// the checkpoint has already reached. With owner set (this process holds the run's lock) it
// then rewrites config.json with what the resumed run uses and a "resumed" entry; otherwise
// (rank 0 under the launcher that holds it) only when the run's settings still differ from
// now's, as on a restart on fewer ranks.
func recordResume(dir string, now trainLaunch, owner bool, reg *trainer.Registry) error {
	path := filepath.Join(dir, metrics.ConfigFile)
	b, err := metrics.ReadFileLimit(path, metrics.MaxConfigBytes)
	if err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	var was map[string]json.RawMessage
	if err := json.Unmarshal(b, &was); err != nil {
		return fmt.Errorf("--resume %s: %s: %w", dir, path, err)
	}
	if b, err = json.Marshal(now); err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	var is map[string]json.RawMessage
	if err := json.Unmarshal(b, &is); err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	for _, f := range resumeFixed {
		if old, ok := was[f.key]; ok && !sameJSON(old, is[f.key]) {
			return fmt.Errorf("%s %s: the run in %s was trained with %s %s; a resumed run keeps it (start a new run to change it)",
				f.flag, showJSON(is[f.key]), dir, f.flag, showJSON(old))
		}
	}
	if old, ok := was["options"]; ok && !sameJSON(old, is["options"]) {
		return fmt.Errorf("--sync %s options %s: the run in %s was trained with %s; a resumed run keeps its strategy's options",
			now.Strategy, showJSON(is["options"]), dir, showJSON(old))
	}
	ck, _, err := trainer.LoadCheckpoint(dir, 0)
	if err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	if now.MaxRounds > 0 && now.MaxRounds <= ck.Round {
		return fmt.Errorf("--max-rounds %d: the checkpoint in %s is after round %d, which the run has trained already; give more rounds to continue it",
			now.MaxRounds, dir, ck.Round)
	}
	if old, ok := was["ranks"]; ok && !sameJSON(old, is["ranks"]) {
		if err := reg.CheckpointResizable(&now.Config); err != nil {
			return fmt.Errorf("--np %d: the run in %s has %s ranks: %w", now.Ranks, dir, showJSON(old), err)
		}
	}
	var changed []string
	for _, k := range slices.Sorted(keys(was, is)) {
		if !slices.Contains(resumeNotes, k) && !sameJSON(was[k], is[k]) {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", k, showJSON(was[k]), showJSON(is[k])))
		}
	}
	if !owner && len(changed) == 0 {
		return nil
	}
	var history []resumeEntry
	if old, ok := was["resumed"]; ok {
		_ = json.Unmarshal(old, &history) // a history this hetsync cannot read starts again
	}
	history = append(history, resumeEntry{Started: time.Now().UTC().Format(time.RFC3339), Round: ck.Round, Ranks: now.Ranks, Changed: changed})
	for _, k := range resumeNotes {
		if old, ok := was[k]; ok {
			is[k] = old
		}
	}
	if is["resumed"], err = json.Marshal(history); err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	out, err := json.MarshalIndent(is, "", "  ")
	if err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	err = metrics.ReplaceFile(path, func(w io.Writer) error {
		_, err := w.Write(append(out, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("--resume %s: recording the resumed run's settings: %w", dir, err)
	}
	return nil
}

// keys is the union of the maps' keys.
func keys(ms ...map[string]json.RawMessage) func(func(string) bool) {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

// sameJSON reports whether two JSON values are equal as values (absent equals null).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(a) > 0 {
		_ = json.Unmarshal(a, &x)
	}
	if len(b) > 0 {
		_ = json.Unmarshal(b, &y)
	}
	return reflect.DeepEqual(x, y)
}

// showJSON is a JSON value for a message: a string without its quotes, nothing as "none".
func showJSON(v json.RawMessage) string {
	s := strings.TrimSpace(string(v))
	switch {
	case s == "" || s == "null":
		return "none"
	case strings.HasPrefix(s, `"`):
		var str string
		if json.Unmarshal(v, &str) == nil {
			return str
		}
	}
	return s
}
