package command

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
)

func TestLaunchMaxRestarts(t *testing.T) {
	// Rank 1 fails on every attempt but the one numbered ok; the others wait for the stop.
	script := func(ok int) string {
		return fmt.Sprintf(`if [ "$HETSYNC_RANK" = 1 ] && [ "$HETSYNC_RESTART_COUNT" != %d ]; then exit 3; fi; `+
			`if [ "$HETSYNC_RANK" = 1 ]; then exit 0; fi; [ "$HETSYNC_RESTART_COUNT" = %d ] && exit 0; exec sleep 600`, ok, ok)
	}
	for _, tc := range []struct {
		name     string
		max, ok  int
		code     int
		restarts int
		want     string
	}{
		{"restarted once", 1, 1, 0, 1, ""},
		{"restarted twice", 3, 2, 0, 2, ""},
		{"no restarts", 0, 1, 3, 0, "rank 1 failed first: exit status 3"},
		{"restarts spent", 2, 5, 3, 2, "after 2 restart(s), --max-restarts 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runBinary(t, "launch", "-np", "3", "--grace", "200ms", "--max-restarts", fmt.Sprint(tc.max), "--", "sh", "-c", script(tc.ok))
			if code != tc.code {
				t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, stderr)
			}
			if n := strings.Count(stderr, "restarting the job"); n != tc.restarts {
				t.Fatalf("%d restarts reported, want %d:\n%s", n, tc.restarts, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
}

// trainRun is what a train job left in its run directory.
type trainRun struct {
	summary metrics.Summary
	rounds  []metrics.RoundRecord
}

func readTrainRun(t *testing.T, dir string) trainRun {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, metrics.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var r trainRun
	if err := json.Unmarshal(b, &r.summary); err != nil {
		t.Fatal(err)
	}
	if _, r.rounds, _, err = metrics.LoadRun(dir); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkRounds checks that every rank of run recorded each round at most once, every round
// from first to last, and none past last.
func checkRounds(t *testing.T, run trainRun, ranks, first, last int) {
	t.Helper()
	seen := map[[2]int]int{}
	for _, r := range run.rounds {
		if r.Round > last {
			t.Errorf("rank %d recorded round %d, past the last %d", r.Rank, r.Round, last)
		}
		seen[[2]int{r.Rank, r.Round}]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("rank %d recorded round %d %d times", k[0], k[1], n)
		}
	}
	for rank := range ranks {
		for round := first; round <= last; round++ {
			if seen[[2]int{rank, round}] == 0 {
				t.Errorf("rank %d did not record round %d", rank, round)
			}
		}
	}
}

// TestTrainResumeAndRestart is the resume test and the restart test of `hetsync train`: a job
// one of whose ranks is killed after round 12 resumes (by hand with --resume, or by itself with
// --max-restarts 1) from the checkpoint after round 9 and ends after the same 30 rounds as an
// uninterrupted job, with the same final accuracy (ssgd's replicas come back bitwise, so the
// run-to-run noise of a resumed run is none).
func TestTrainResumeAndRestart(t *testing.T) {
	root := t.TempDir()
	data := os.Getenv("HETSYNC_DATA")
	common := []string{"train", "-np", "2", "--sync", "ssgd", "--collective", "ring", "--max-rounds", "30", "--eval-every", "1000"}
	if data != "" {
		common = append(common, "--data", data)
	}
	train := func(dir string, extra ...string) (int, string) {
		code, out, stderr := runBinary(t, append(append(common[:len(common):len(common)], "--out", dir), extra...)...)
		return code, out + stderr
	}
	whole := filepath.Join(root, "whole")
	if code, out := train(whole); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", code, out)
	}
	base := readTrainRun(t, whole)
	checkRounds(t, base, 2, 0, 29)

	// checkResumed checks a run that resumed from the checkpoint after round 9 and whose
	// last checkpoint is the one after round lastCk-1: every round recorded once by each rank
	// (the killed attempt's 0..9 and the resumed run's 10..29), a run that finished, with the
	// uninterrupted run's final accuracy.
	checkResumed := func(t *testing.T, dir string, lastCk int) {
		ck, err := trainer.ReadCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Round != lastCk {
			t.Fatalf("checkpoint after %d rounds, want %d", ck.Round, lastCk)
		}
		run := readTrainRun(t, dir)
		checkRounds(t, run, 2, 0, 29)
		if run.summary.EndedEarly != nil || run.summary.Rounds != 30 {
			t.Fatalf("summary of %d rounds, ended early: %v; want 30 rounds, a finished run", run.summary.Rounds, run.summary.EndedEarly)
		}
		if run.summary.FinalAccuracy != base.summary.FinalAccuracy || run.summary.FinalLoss != base.summary.FinalLoss {
			t.Fatalf("final accuracy %v (loss %v), uninterrupted %v (loss %v)", run.summary.FinalAccuracy, run.summary.FinalLoss,
				base.summary.FinalAccuracy, base.summary.FinalLoss)
		}
	}
	t.Run("resume", func(t *testing.T) {
		dir := filepath.Join(root, "resumed")
		code, out := train(dir, "--checkpoint-every", "5", "--fail-at-round", "1:12")
		if code == 0 || !strings.Contains(out, "rank 1 failed first") {
			t.Fatalf("the killed run exited %d:\n%s", code, out)
		}
		ck, err := trainer.ReadCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Round != 10 {
			t.Fatalf("checkpoint after %d rounds, want 10 (the last one every 5 rounds before rank 1 died after round 12)", ck.Round)
		}
		if code, out := train(dir, "--resume", dir); code != 0 {
			t.Fatalf("resume: exit %d\n%s", code, out)
		}
		checkResumed(t, dir, 10)
	})
	t.Run("restart", func(t *testing.T) {
		dir := filepath.Join(root, "restarted")
		code, out := train(dir, "--checkpoint-every", "5", "--fail-at-round", "1:12", "--max-restarts", "1")
		if code != 0 || !strings.Contains(out, "restarting the job (restart 1 of 1)") {
			t.Fatalf("exit %d, want 0 after one restart:\n%s", code, out)
		}
		// The restarted job has --checkpoint-every too: its last is after round 24.
		checkResumed(t, dir, 25)
	})
}

// runRestartedOnce runs `hetsync train` with args (and $HETSYNC_DATA's data set, if set), which
// must fail once and succeed after one restart.
func runRestartedOnce(t *testing.T, args []string) {
	t.Helper()
	if data := os.Getenv("HETSYNC_DATA"); data != "" {
		args = append(args, "--data", data)
	}
	code, out, stderr := runBinary(t, args...)
	if code != 0 || !strings.Contains(stderr, "restarting the job (restart 1 of 1)") {
		t.Fatalf("exit %d, want 0 after one restart:\n%s%s", code, out, stderr)
	}
}

// TestRestartEvaluatesTheCheckpointRound: rank 1 is killed one round after the checkpoint of
// round 10, a round due for evaluation (--eval-every 5), before rank 0's evaluation of it is
// recorded; the job restarts from that checkpoint (--max-restarts 1), and its eval.jsonl still
// holds the evaluation of round 10, once, as every other round's at most once.
func TestRestartEvaluatesTheCheckpointRound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"train", "-np", "2", "--sync", "ssgd", "--collective", "ring", "--max-rounds", "15", "--eval-every", "5",
		"--out", dir, "--checkpoint-every", "5", "--fail-at-round", "1:10", "--max-restarts", "1"}
	runRestartedOnce(t, args)
	_, _, evals, err := metrics.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, e := range evals {
		seen[e.Round]++
	}
	for round, n := range seen {
		if n > 1 {
			t.Errorf("round %d evaluated %d times", round, n)
		}
	}
	if seen[10] != 1 || seen[15] != 1 {
		t.Fatalf("evaluations of rounds %v; want the checkpoint's round 10 and the final 15 among them", seen)
	}
}

// TestTrainRestartsFromPerRankParts is the restart test for a strategy whose ranks each write
// their own part (esync): rank 1 is killed after round 12, the job restarts with
// --max-restarts 1 from the parts of the checkpoint after round 10, and ends after the same 20
// rounds, every round recorded once by each rank, with one part per rank of its last
// checkpoint left.
func TestTrainRestartsFromPerRankParts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"train", "-np", "3", "--sync", "esync", "--collective", "ring", "--max-rounds", "20", "--eval-every", "1000",
		"--out", dir, "--checkpoint-every", "5", "--fail-at-round", "1:12", "--max-restarts", "1"}
	runRestartedOnce(t, args)
	run := readTrainRun(t, dir)
	checkRounds(t, run, 3, 0, 19)
	if run.summary.EndedEarly != nil || run.summary.Rounds != 20 {
		t.Fatalf("summary of %d rounds, ended early: %v; want 20 rounds, a finished run", run.summary.Rounds, run.summary.EndedEarly)
	}
	// The restarted job's last checkpoint is the one after round 15 (it stops after 20).
	for r := range 3 {
		ck, _, err := trainer.LoadCheckpoint(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Round != 15 || ck.Rank == nil || *ck.Rank != r {
			t.Fatalf("rank %d's part is of round %d, rank %v; want round 15", r, ck.Round, ck.Rank)
		}
	}
	if parts, err := filepath.Glob(filepath.Join(dir, trainer.CheckpointPartsDir, "*")); err != nil || len(parts) != 3 {
		t.Fatalf("parts left: %v (%v), want 3", parts, err)
	}
}

// TestResumeFlagErrors: the checkpoint, resume and restart flags are checked before any rank
// starts, and each error names its flag (exit status 2).
func TestResumeFlagErrors(t *testing.T) {
	empty := t.TempDir()
	notCkpt := t.TempDir()
	if err := os.WriteFile(filepath.Join(notCkpt, trainer.CheckpointFile), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	train := []string{"train", "--np", "2", "--max-rounds", "3"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--checkpoint-every", "0"}, "--checkpoint-every needs exactly one of a round count or a duration, got 0"},
		{[]string{"--checkpoint-every", "-2s"}, "--checkpoint-every must be positive"},
		{[]string{"--checkpoint-every", "soon"}, `--checkpoint-every "soon" is neither a round count`},
		{[]string{"--checkpoint-every", "5", "--sync", "local"}, "--sync local cannot be checkpointed"},
		{[]string{"--resume", empty, "--sync", "asgd"}, "--sync asgd cannot be checkpointed"},
		{[]string{"--resume", empty}, "--resume " + empty + ": trainer: checkpoint: "},
		{[]string{"--resume", notCkpt}, "not a hetsync checkpoint"},
		{[]string{"--resume", empty, "--out", notCkpt}, "a resumed run continues its own run directory"},
		{[]string{"--max-restarts", "-1"}, "--max-restarts -1: must not be negative"},
		{[]string{"--max-restarts", "2"}, "--max-restarts 2 needs --checkpoint-every"},
		{[]string{"--max-restarts", "1", "--checkpoint-every", "5", "--transport", "mem"}, "restarts need rank processes"},
		{[]string{"--fail-at-round", "1"}, `--fail-at-round "1": want RANK:ROUND`},
		{[]string{"--fail-at-round", "1:x"}, `--fail-at-round "1:x": want RANK:ROUND`},
		{[]string{"--fail-at-round", "0:1", "--transport", "mem"}, "--fail-at-round: --transport mem"},
		{[]string{"--min-np", "-1"}, "--min-np -1: must not be negative"},
		{[]string{"--min-np", "3"}, "--min-np 3 is more than --np 2"},
		{[]string{"--min-np", "1"}, "--min-np 1 needs -H or --hostfile"},
		{[]string{"--min-np", "1", "-H", "localhost:2", "--sync", "esync", "--checkpoint-every", "5"}, "--min-np 1: --sync esync cannot continue a checkpoint on another number of ranks"},
	} {
		args := append(train[:len(train):len(train)], tc.args...)
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-restarts", "-1"}, "--max-restarts -1"},
		{[]string{"--min-np", "3"}, "--min-np 3 is more than --np 2"},
		{[]string{"--min-np", "1"}, "--min-np 1 needs -H or --hostfile"},
	} {
		args := append(append([]string{"launch", "-np", "2"}, tc.args...), "true")
		if code, _, stderr := runCLI(t, args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, stderr, tc.want)
		}
	}
}

// TestResumeKeepsTheRun: a --resume that changes what defines the run (--lr, --batch,
// --sync, --seed, --model) or asks for fewer rounds than its checkpoint has done is refused
// before any rank starts (exit 2), naming the flag and both values, and leaves the run as it
// was; one that changes what may change (the stop rule, the number of ssgd ranks) trains, and
// config.json then records what it used, which `report` reads.
func TestResumeKeepsTheRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	common := []string{"train", "--sync", "ssgd", "--collective", "ring", "--eval-every", "1000"}
	if data := os.Getenv("HETSYNC_DATA"); data != "" {
		common = append(common, "--data", data)
	}
	train := func(extra ...string) (int, string) {
		code, out, stderr := runBinary(t, append(common[:len(common):len(common)], extra...)...)
		return code, out + stderr
	}
	if code, out := train("-np", "2", "--max-rounds", "6", "--checkpoint-every", "3", "--out", dir); code != 0 {
		t.Fatalf("the first run: exit %d\n%s", code, out)
	}
	ck, err := trainer.ReadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	config := func() string { return read(metrics.ConfigFile) }
	before, summary := config(), read(metrics.SummaryFile)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr", "0.5"}, "--lr 0.5: the run in " + dir + " was trained with --lr 0.05"},
		{[]string{"--batch", "32"}, "--batch 32: the run in " + dir + " was trained with --batch 64"},
		{[]string{"--sync", "esync"}, "--sync esync: the run in " + dir + " was trained with --sync ssgd"},
		{[]string{"--seed", "2"}, "--seed 2: the run in " + dir + " was trained with --seed 1"},
		{[]string{"--model", "cnn"}, "--model cnn: the run in " + dir + " was trained with --model mlp"},
		{[]string{"--max-rounds", fmt.Sprint(ck.Round)}, fmt.Sprintf("--max-rounds %d: the checkpoint in %s is after round %d", ck.Round, dir, ck.Round)},
	} {
		code, out := train(append([]string{"-np", "2", "--max-rounds", "9", "--resume", dir}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d; want exit 2 and %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	if after := config(); after != before {
		t.Fatalf("refused resumes changed config.json:\n%s\nwas:\n%s", after, before)
	}
	if after := read(metrics.SummaryFile); after != summary {
		t.Fatalf("refused resumes changed summary.json:\n%s\nwas:\n%s", after, summary)
	}
	if code, out := train("-np", "3", "--max-rounds", "9", "--resume", dir); code != 0 {
		t.Fatalf("resume on 3 ranks: exit %d\n%s", code, out)
	}
	var rec struct {
		Ranks     int           `json:"ranks"`
		MaxRounds int           `json:"max_rounds"`
		Resumed   []resumeEntry `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(config()), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Ranks != 3 || rec.MaxRounds != 9 || len(rec.Resumed) != 1 || rec.Resumed[0].Round != ck.Round ||
		!slices.Contains(rec.Resumed[0].Changed, "max_rounds: 6 -> 9") || !slices.Contains(rec.Resumed[0].Changed, "ranks: 2 -> 3") {
		t.Fatalf("config.json after the resume records %+v; want 3 ranks, 9 rounds, one resume after round %d that changed both:\n%s", rec, ck.Round, config())
	}
	if code, out, stderr := runBinary(t, "report", "--out", filepath.Join(t.TempDir(), "report"), dir); code != 0 {
		t.Fatalf("report of the resumed run: exit %d\n%s%s", code, out, stderr)
	}
}
