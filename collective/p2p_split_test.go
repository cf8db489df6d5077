package collective_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestSplitOverP2P forms a 4-rank libp2p job on loopback, splits it by parity and runs, on
// every rank at once, a non-blocking allreduce on its half, a barrier on the whole job and a
// blocking allreduce on the half behind them.
func TestSplitOverP2P(t *testing.T) {
	const p = 4
	eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "split over p2p", Logger: slog.New(slog.DiscardHandler)}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sums := make([][2]int64, p)
	err := eachRank(p, func(r int) error {
		world, err := collective.New(eps[r], collective.Options{Algorithm: "ring"})
		if err != nil {
			return err
		}
		half, err := world.Split(ctx, r%2, -r)
		if err != nil {
			return err
		}
		first, second := []int64{int64(r)}, []int64{int64(10 * r)}
		req := half.IAllReduce(ctx, collective.I64(first), collective.Sum)
		if err := world.Barrier(ctx); err != nil {
			return err
		}
		if err := half.AllReduce(ctx, collective.I64(second), collective.Sum); err != nil {
			return err
		}
		if err := req.Wait(ctx); err != nil {
			return err
		}
		sums[r] = [2]int64{first[0], second[0]}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, s := range sums {
		want := [2]int64{2, 20} // ranks 0 and 2
		if r%2 == 1 {
			want = [2]int64{4, 40} // ranks 1 and 3
		}
		if s != want {
			t.Errorf("rank %d: sums %v, want %v", r, s, want)
		}
	}
}
