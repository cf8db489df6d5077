package trainer

import (
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestSSGDOverLibp2p trains over real libp2p hosts on loopback: the loss falls and every
// rank's model is bitwise identical after every round.
func TestSSGDOverLibp2p(t *testing.T) {
	for _, tc := range []struct {
		size               int
		coll, sec, dataPth string
	}{
		{4, "ring", "tls", "stream"},
		{3, "binary-blocks", "none", "tcp"},
		{4, "butterfly", "tls", "auto"},
	} {
		t.Run(fmt.Sprintf("%s_p%d_%s_%s", tc.coll, tc.size, tc.sec, tc.dataPth), func(t *testing.T) {
			cfg := Config{Strategy: "ssgd", Collective: tc.coll, Batch: 8, LR: 0.2, Momentum: 0.9,
				MaxRounds: 30, Seed: 5, Eval: EvalEvery{Rounds: 10}}
			out := runSynthJobOn(t, cfg, p2ptest.JoinLoopback(t, tc.size, p2p.Config{Secret: "trainer-p2p-test", Security: tc.sec, DataPath: tc.dataPth}, nil))
			out.checkReplicasAgree(t, tc.size)
			if len(out.hashes) != 30 {
				t.Errorf("%d rounds recorded, want 30", len(out.hashes))
			}
			out.checkLossFell(t)
			if len(out.all) != 30*tc.size {
				t.Errorf("rank 0 gathered %d records, want %d", len(out.all), 30*tc.size)
			}
		})
	}
}
