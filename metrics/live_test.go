package metrics

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEndEarlyFromRankFiles writes each rank's file as a job would, tears the last line of
// one (a rank killed mid-write), and checks that EndEarly assembles metrics.jsonl from what
// the ranks wrote and records why and where the run ended.
func TestEndEarlyFromRankFiles(t *testing.T) {
	for _, tc := range []struct {
		ranks, rounds int
		evals         int
	}{{1, 1, 0}, {2, 3, 1}, {3, 5, 2}, {5, 2, 0}, {9, 7, 3}} {
		t.Run(strings.Repeat("r", tc.ranks), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			d, err := CreateRunDir(dir, map[string]any{"ranks": tc.ranks})
			if err != nil {
				t.Fatal(err)
			}
			for e := range tc.evals {
				if err := d.Evals().WriteEval(&EvalRecord{TimeS: float64(e + 1), Round: e, Accuracy: 0.5}); err != nil {
					t.Fatal(err)
				}
			}
			for rank := range tc.ranks {
				rr, err := OpenRankRecords(dir, rank)
				if err != nil {
					t.Fatal(err)
				}
				for round := range tc.rounds - rank%2 { // odd ranks one round behind
					if err := rr.WriteRound(&RoundRecord{Rank: rank, Round: round, TimeS: float64(round + 1), Samples: 8, ComputeS: 0.5}); err != nil {
						t.Fatal(err)
					}
				}
				if err := rr.Close(); err != nil {
					t.Fatal(err)
				}
			}
			// rank 0 was killed in the middle of a line
			f, err := os.OpenFile(RankRecordsPath(dir, 0), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"rank":0,"round":99,"time_s":1`)
			f.Close()
			d.Close()

			if e := Ending(dir, nil); e == nil || e.Reason != NoSummaryReason {
				t.Fatalf("Ending before EndEarly: %+v; want %q", e, NoSummaryReason)
			}
			s, err := EndEarly(dir, "interrupted")
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for rank := range tc.ranks {
				want += tc.rounds - rank%2
			}
			_, rounds, evals, err := LoadRun(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(rounds) != want || len(evals) != tc.evals {
				t.Fatalf("%d records and %d evaluations, want %d and %d", len(rounds), len(evals), want, tc.evals)
			}
			b, err := os.ReadFile(filepath.Join(dir, MetricsFile))
			if err != nil || strings.Count(string(b), "\n") != want {
				t.Fatalf("metrics.jsonl has %d lines (%v), want %d", strings.Count(string(b), "\n"), err, want)
			}
			if s.EndedEarly == nil || s.EndedEarly.Round != tc.rounds-1 || s.EndedEarly.Reason != "interrupted" || s.Ranks != tc.ranks {
				t.Fatalf("summary: %+v, ranks %d", s.EndedEarly, s.Ranks)
			}
			if got := s.EndedEarly.String(); got != "ended early at round "+strconv.Itoa(tc.rounds-1)+" (interrupted)" {
				t.Errorf("String() = %q", got)
			}
			// the first account stands: a later EndEarly (the launcher's) changes nothing
			if s2, err := EndEarly(dir, "job failed"); err != nil || s2.EndedEarly == nil || s2.EndedEarly.Reason != "interrupted" {
				t.Fatalf("second EndEarly: %+v, %v", s2.EndedEarly, err)
			}
			if e := Ending(dir, nil); e == nil || e.Reason != "interrupted" {
				t.Fatalf("Ending: %+v", e)
			}
		})
	}
}

// TestRankFilesErrors checks that a rank file holding another rank's record, or a bad line
// before its last, is an error naming the file, and that a run with no records anywhere is one.
func TestRankFilesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, body, want string
	}{
		{"other rank", "rank-1.jsonl", `{"rank":2,"round":0}` + "\n", "rank-1.jsonl holds a record of rank 2"},
		{"bad middle line", "rank-0.jsonl", "xx\n" + `{"rank":0,"round":0}` + "\n", "rank-0.jsonl:1"},
		{"a round twice", "rank-1.jsonl", `{"rank":1,"round":0}` + "\n" + `{"rank":1,"round":1}` + "\n" + `{"rank":1,"round":0}` + "\n", "rank-1.jsonl records rank 1's round 0 more than once"},
		{"nothing", "", "", "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, RanksDir), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{}"), 0o644)
			if tc.file != "" {
				os.WriteFile(filepath.Join(dir, RanksDir, tc.file), []byte(tc.body), 0o644)
			}
			if _, _, _, err := LoadRun(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadRun: %v, want %q", err, tc.want)
			}
			if _, err := EndEarly(dir, "x"); err == nil {
				t.Fatal("EndEarly succeeded")
			}
		})
	}
	if _, err := OpenRankRecords(t.TempDir(), -1); err == nil || !strings.Contains(err.Error(), "rank -1") {
		t.Fatalf("OpenRankRecords(-1): %v", err)
	}
}
