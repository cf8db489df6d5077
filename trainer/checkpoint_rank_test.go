package trainer

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// perRankCase is a strategy whose checkpoints are per-rank parts. bitwise says whether its
// rounds are deterministic on size ranks in process, so that a resumed job must end with the
// uninterrupted job's model bitwise; otherwise its accuracy must be within tol of it.
type perRankCase struct {
	strategy, collective string
	bitwise              func(size int) bool
	tol                  float64
}

func perRankCases() []perRankCase {
	return []perRankCase{
		// One rank is always the slowest, so READY follows its every first step; on more
		// ranks n_i depends on the steps' timings.
		{strategy: "esync", collective: "ring", bitwise: func(size int) bool { return size == 1 }, tol: 0.05},
		// How many steps a round holds depends on when the trigger's barrier completes, even
		// on one rank (its first round has no trigger rank).
		{strategy: "wbsp", collective: "ring", bitwise: func(int) bool { return false }, tol: 0.05},
		{strategy: "wbsp", collective: "butterfly", bitwise: func(int) bool { return false }, tol: 0.05},
	}
}

// TestPerRankResumeEndsAtTheSameRound kills a job after round 9 (a hook, not a clock) and
// resumes it from the per-rank checkpoint: the resumed job runs exactly the rounds the killed
// one had left, every rank's part held that rank's own data position, and the job ends with
// the uninterrupted job's model (bitwise where the strategy is deterministic) or accuracy.
func TestPerRankResumeEndsAtTheSameRound(t *testing.T) {
	const rounds = 16
	for _, tc := range perRankCases() {
		for _, size := range []int{1, 2, 3, 4, 5, 7, 9} {
			// every 0 is a period of 1ns: due after every round by rank 0's clock, which
			// the others learn from rank 0.
			for _, every := range []int{0, 1, 4} {
				t.Run(fmt.Sprintf("%s-%s-np%d-every%d", tc.strategy, tc.collective, size, every), func(t *testing.T) {
					period := EvalEvery{Rounds: every}
					if every == 0 {
						period, every = EvalEvery{Interval: time.Nanosecond}, 1
					}
					cfg := Config{Strategy: tc.strategy, Collective: tc.collective, Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: rounds, Seed: 3}
					whole := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
					if whole.err != nil {
						t.Fatal(whole.err)
					}
					dir := t.TempDir()
					kept := 10 / every * every
					var mu sync.Mutex
					steps := make([]uint64, size) // each rank's steps after round kept-1
					killed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 9,
						opts: CheckpointOptions{Dir: dir, Every: period},
						steps: func(rank, round int, n uint64) {
							if round == kept-1 {
								mu.Lock()
								steps[rank] = n
								mu.Unlock()
							}
						}})
					if killed.err == nil {
						t.Fatal("the killed job did not fail")
					}
					parts, err := filepath.Glob(filepath.Join(dir, CheckpointPartsDir, "*"))
					if err != nil || len(parts) != size {
						t.Fatalf("%d files in %s (%v), want one part per rank: %v", len(parts), CheckpointPartsDir, err, parts)
					}
					for r := range size {
						ck, _, err := LoadCheckpoint(dir, r)
						if err != nil {
							t.Fatal(err)
						}
						if ck.Round != kept || ck.Steps != steps[r] || ck.WorldSize != size || ck.Rank == nil || *ck.Rank != r {
							t.Fatalf("rank %d's part: round %d, %d steps, %d ranks; want round %d, %d steps, %d ranks", r, ck.Round, ck.Steps, ck.WorldSize, kept, steps[r], size)
						}
					}
					resumed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, resume: dir})
					if resumed.err != nil {
						t.Fatal(resumed.err)
					}
					if n := len(resumed.records); n != rounds-kept || resumed.records[0].Round != kept || resumed.records[n-1].Round != rounds-1 {
						t.Fatalf("resumed rounds %d..%d (%d), want %d..%d", resumed.records[0].Round, resumed.records[n-1].Round, n, kept, rounds-1)
					}
					for r := 1; r < size; r++ {
						if !slices.Equal(resumed.params[r], resumed.params[0]) {
							t.Fatalf("rank %d's resumed model differs from rank 0's", r)
						}
					}
					if tc.bitwise(size) {
						if !slices.Equal(resumed.params[0], whole.params[0]) {
							t.Fatal("the resumed model differs from the uninterrupted one")
						}
						return
					}
					t.Logf("accuracy %.4f resumed, %.4f uninterrupted", resumed.acc, whole.acc)
					if math.Abs(resumed.acc-whole.acc) > tc.tol {
						t.Fatalf("accuracy %v resumed, %v uninterrupted: more than %v apart", resumed.acc, whole.acc, tc.tol)
					}
				})
			}
		}
	}
}

// TestPerRankCheckpointNamesTheMissingPart: a part that is missing, or that belongs to
// another round or rank, fails the resume of that rank, naming the rank and the file.
func TestPerRankCheckpointNamesTheMissingPart(t *testing.T) {
	const size = 3
	cfg := Config{Strategy: "esync", Collective: "ring", Batch: 5, LR: 0.1, MaxRounds: 8, Seed: 2}
	dir := t.TempDir()
	if out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 4, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 2}}}); out.err == nil {
		t.Fatal("the killed job did not fail")
	}
	part := func(r int) string { return filepath.Join(dir, checkpointPart(r, 4)) }
	for _, tc := range []struct {
		name    string
		rank    int
		break_  func() error
		restore func() error
		want    []string
	}{
		{"missing", 2, func() error { return os.Rename(part(2), part(2)+".away") }, func() error { return os.Rename(part(2)+".away", part(2)) },
			[]string{"rank 2", part(2), "no such file"}},
		{"another rank's", 1, func() error { return copyFile(part(0), part(1)) }, nil,
			[]string{"rank 1", part(1), "not rank 1's"}},
		{"beyond the world", 3, func() error { return nil }, nil,
			[]string{"rank 3", "written by 3 ranks", "no part for rank 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.break_(); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadCheckpoint(dir, tc.rank)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("got %v, want it to say %q", err, w)
				}
			}
			if tc.restore != nil {
				if err := tc.restore(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, _, err := LoadCheckpoint(dir, 0); err != nil {
		t.Fatal(err)
	}
	// A whole-job checkpoint does not resume a per-rank strategy, nor a part a whole-job one.
	ck, file, err := LoadCheckpoint(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := runCkptJob(t, ckptJob{cfg: Config{Strategy: "ssgd", Collective: "ring", Batch: 5, LR: 0.1, MaxRounds: 8, Seed: 2}, size: 1, cancelAt: -1,
		opts: CheckpointOptions{Resume: ck, File: file}})
	if out.err == nil || !strings.Contains(out.err.Error(), "is of Config.Strategy esync") {
		t.Fatalf("got %v", out.err)
	}
}

// TestCheckpointManifestChecked: a manifest that does not name one part per rank of its round
// is refused, naming the file.
func TestCheckpointManifestChecked(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"not json", "{", "unexpected EOF"},
		{"unknown field", `{"strategy":"esync","world_size":1,"round":2,"parts":["checkpoints/rank-0.round-2.ckpt"],"x":1}`, "unknown field"},
		{"too few parts", `{"strategy":"esync","world_size":2,"round":2,"parts":["checkpoints/rank-0.round-2.ckpt"]}`, "1 parts for 2 ranks"},
		{"a part elsewhere", `{"strategy":"esync","world_size":1,"round":2,"parts":["../rank-0.round-2.ckpt"]}`, "rank 0's part is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, CheckpointManifestFile), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, err := range []error{HasCheckpoint(dir), func() error { _, _, err := LoadCheckpoint(dir, 0); return err }()} {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), CheckpointManifestFile) {
					t.Fatalf("got %v, want it to say %q", err, tc.want)
				}
			}
		})
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// TestPerRankPlanIsRank0s: the checkpoint directory and period are rank 0's, whatever the
// other ranks were given, so every rank writes its part after the same rounds; a rank that
// does not resume from the checkpoint rank 0 resumes from is an error naming it.
func TestPerRankPlanIsRank0s(t *testing.T) {
	const size = 3
	cfg := Config{Strategy: "wbsp", Collective: "ring", Batch: 5, LR: 0.1, MaxRounds: 8, Seed: 2}
	dir := t.TempDir()
	if out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 5, only0: true, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 3}}}); out.err == nil {
		t.Fatal("the killed job did not fail")
	}
	for r := range size {
		if ck, _, err := LoadCheckpoint(dir, r); err != nil || ck.Round != 6 {
			t.Fatalf("rank %d: %v, want its part of round 6", r, err)
		}
	}
	out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, only0: true, resume: dir})
	// The start barrier finds it (agree.go), before the per-rank plan would.
	if out.err == nil || !strings.Contains(out.err.Error(), "rank 1: config differs between ranks: the checkpoint resumed from is round 6 on rank 0 but none on ranks 1,2") {
		t.Fatalf("got %v", out.err)
	}
}

// TestPerRankPartsCountOnlyOnceTheManifestNamesThem: parts written after the manifest's round
// (a job killed before rank 0 replaced the manifest) do not change what a resume reads, and
// the next committed checkpoint removes every part but its own.
func TestPerRankPartsCountOnlyOnceTheManifestNamesThem(t *testing.T) {
	const size = 3
	cfg := Config{Strategy: "esync", Collective: "ring", Batch: 5, LR: 0.1, MaxRounds: 8, Seed: 2}
	dir := t.TempDir()
	opts := CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 2}}
	if out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 4, opts: opts}); out.err == nil {
		t.Fatal("the killed job did not fail")
	}
	for r := range size { // torn parts of a checkpoint whose manifest was never written
		if err := os.WriteFile(filepath.Join(dir, checkpointPart(r, 10)), []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for r := range size {
		if ck, _, err := LoadCheckpoint(dir, r); err != nil || ck.Round != 4 {
			t.Fatalf("rank %d: %v, want its part of round 4", r, err)
		}
	}
	out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, resume: dir, opts: opts})
	if out.err != nil {
		t.Fatal(out.err)
	}
	parts, err := filepath.Glob(filepath.Join(dir, CheckpointPartsDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, checkpointPart(0, 6)), filepath.Join(dir, checkpointPart(1, 6)), filepath.Join(dir, checkpointPart(2, 6))}
	if !slices.Equal(parts, want) {
		t.Fatalf("parts left %v, want %v", parts, want)
	}
}
