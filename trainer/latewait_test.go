package trainer

import (
	"fmt"
	"testing"
)

// TestLateRankOfAStraggler slows one rank's compute by far more than a loaded host's noise:
// every other rank's rounds name it as the rank they waited for, and it names nobody or
// someone else. SSGD waits for the straggler every round; ESync lets the fast ranks compute
// meanwhile (the last to arrive can then be a fast rank) and Sync-Switch leaves the
// collectives once it detects the straggler, so neither names it every round by design.
func TestLateRankOfAStraggler(t *testing.T) {
	cases := []struct {
		strategy, collective string
		p, straggler         int
	}{
		{"ssgd", "ring", 2, 1},
		{"ssgd", "butterfly", 3, 0},
		{"ssgd", "binary-blocks", 5, 3},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/p=%d", tc.strategy, tc.collective, tc.p), func(t *testing.T) {
			s, err := ParseStragglers(fmt.Sprintf("ranks=%d;delay=300ms;at=0s;for=1h;mode=compute", tc.straggler))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Strategy: tc.strategy, Collective: tc.collective, Batch: 8, LR: 0.05, MaxRounds: 3, Seed: 4,
				Eval: EvalEvery{Rounds: 3}, Stragglers: s}
			out := runCapturedJob(t, cfg, tc.p, nil)
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
