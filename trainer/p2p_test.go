package trainer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
)

// joinLoopback starts a size-rank libp2p job in this process on 127.0.0.1.
func joinLoopback(t *testing.T, size int, security, dataPath string) []transport.Endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps := make([]transport.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eps[r], errs[r] = p2p.Join(ctx, p2p.Config{Rank: r, Size: size, Rendezvous: addr,
				Secret: "trainer-p2p-test", Security: security, DataPath: dataPath,
				JoinTimeout: 50 * time.Second})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			transport.CloseAll(eps)
			t.Fatalf("rank %d: join: %v", r, err)
		}
	}
	return eps
}

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
			out := runSynthJobOn(t, cfg, joinLoopback(t, tc.size, tc.sec, tc.dataPth))
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
