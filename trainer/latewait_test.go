package trainer

import (
	"fmt"
	"testing"
)

// TestLateRankOfAStraggler slows one rank's compute by far more than a loaded host's noise:
// every other rank's rounds name it as the rank they waited for, and it names nobody or
// someone else. SSGD waits for the straggler every round; ESync lets the fast ranks compute
// meanwhile (the last to arrive can then be a fast rank) and Sync-Switch leaves the
// collectives once it detects the straggler, so neither names it every round by design. A
// network straggler (mode=network) slows its links, and the ranks that waited on them start
// the next call late in turn (docs/attribution.md): a round can name one of those, so it is
// not tested here either.
func TestLateRankOfAStraggler(t *testing.T) {
	cases := []struct {
		strategy, collective, mode string
		p, straggler               int
	}{
		{"ssgd", "ring", "compute", 2, 1},
		{"ssgd", "butterfly", "compute", 3, 0},
		{"ssgd", "binary-blocks", "compute", 5, 3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%s/p=%d", tc.strategy, tc.collective, tc.mode, tc.p), func(t *testing.T) {
			s, err := ParseStragglers(fmt.Sprintf("ranks=%d;delay=300ms;at=0s;for=1h;mode=%s", tc.straggler, tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Strategy: tc.strategy, Collective: tc.collective, Batch: 8, LR: 0.05, MaxRounds: 3, Seed: 4,
				Eval: EvalEvery{Rounds: 3}, Stragglers: s}
			out := runCapturedJob(t, cfg, tc.p, s.WrapEndpoint)
			for r, recs := range out.records {
				if len(recs) == 0 {
					t.Fatalf("rank %d recorded no round", r)
				}
				for _, rec := range recs {
					if err := rec.Validate(); err != nil {
						t.Fatal(err)
					}
					if r == tc.straggler {
						if rec.LateRank == tc.straggler {
							t.Fatalf("the straggler (rank %d) waited for itself in round %d", r, rec.Round)
						}
						continue
					}
					if rec.LateRank != tc.straggler || !(rec.LateWaitS > 0) {
						t.Fatalf("rank %d round %d: late_rank %d, late_wait_s %v; want the straggler, rank %d",
							r, rec.Round, rec.LateRank, rec.LateWaitS, tc.straggler)
					}
				}
			}
		})
	}
}
