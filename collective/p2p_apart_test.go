package collective_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestPendingRecvLeavesCollectivesAlone: rank 0 posts a receive from rank 1 and waits until it
// is waiting in the transport, then every rank runs a barrier and an allreduce, and only then
// does rank 1 send. The pending receive must not take rank 1's collective messages (it failed
// with "does not match" or "another Recv is already waiting", or hung on shm, when
// point-to-point messages shared the collectives' channel), on every data path, on the job's
// communicator and on a sub-communicator. The endpoints are seen through recvWatch, so the
// collectives run over the data path's connections or rings, never a shared-memory arena
// (whose collectives send no message to take).
func TestPendingRecvLeavesCollectivesAlone(t *testing.T) {
	const p, rounds = 4, 10
	for _, path := range []string{"mem", p2p.DataPathTCP, p2p.DataPathStream, p2p.DataPathShm} {
		t.Run(path, func(t *testing.T) {
			var eps []transport.Endpoint
			if path == "mem" {
				eps = transport.NewMemJob(p)
			} else {
				eps = p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "pending recv " + t.Name(), DataPath: path,
					Security: p2p.SecurityNone, Logger: slog.New(slog.DiscardHandler)}, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Every rank's endpoint is wrapped alike, so that they all plan the same collectives.
			watches := make([]*recvWatch, p)
			for r := range eps {
				watches[r] = &recvWatch{Endpoint: eps[r], entered: make(chan struct{}, 1)}
				eps[r] = watches[r]
			}
			err := eachRank(p, func(r int) error {
				c, err := collective.New(eps[r], collective.Options{})
				if err != nil {
					return err
				}
				var w *recvWatch // job rank 0's; the other ranks' receives are not watched
				if r == 0 {
					w = watches[0]
				}
				for i := range rounds {
					if err := pendingRecvRound(ctx, c, w, i); err != nil {
						return err
					}
				}
				// Ranks 0 and 2 form one sub-communicator, 1 and 3 the other: the same exchange
				// on its own channels, beside the parent's.
				sub, err := c.Split(ctx, r%2, r)
				if err != nil {
					return fmt.Errorf("rank %d: split: %w", r, err)
				}
				for i := range rounds {
					if err := pendingRecvRound(ctx, sub, w, i); err != nil {
						return fmt.Errorf("rank %d sub-communicator: %w", r, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// recvWatch is rank 0's endpoint in TestPendingRecvLeavesCollectivesAlone: it says when a
// receive reached the transport.
type recvWatch struct {
	transport.Endpoint
	entered chan struct{}
}

func (w *recvWatch) RecvAny(ctx context.Context, from int, ch transport.Channel, buf []byte) (transport.Header, int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	return w.Endpoint.RecvAny(ctx, from, ch, buf)
}

// pendingRecvRound is one round of TestPendingRecvLeavesCollectivesAlone on c: rank 0's
// receive is waiting in the transport before any collective starts, when watch (rank 0's
// endpoint) is not nil.
func pendingRecvRound(ctx context.Context, c *collective.Comm, watch *recvWatch, round int) error {
	r, p := c.Rank(), c.Size()
	msg := []int32{int32(round), 1, 2, 3, 4}
	got := make([]int32, len(msg))
	var req *collective.Request
	if r == 0 && watch != nil {
		// Nothing else receives on rank 0 now: what entered before is the last round's.
		select {
		case <-watch.entered:
		default:
		}
	}
	if r == 0 {
		req = c.IRecv(ctx, 1, collective.I32(got))
	}
	if r == 0 && watch != nil {
		select {
		case <-watch.entered:
		case <-ctx.Done():
			return fmt.Errorf("rank 0 round %d: the receive never reached the transport", round)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("rank %d round %d: barrier: %w", r, round, err)
	}
	x := []int64{int64(r)}
	if err := c.AllReduce(ctx, collective.I64(x), collective.Sum); err != nil {
		return fmt.Errorf("rank %d round %d: allreduce: %w", r, round, err)
	}
	if want := int64(p * (p - 1) / 2); x[0] != want {
		return fmt.Errorf("rank %d round %d: allreduce gave %d, want %d", r, round, x[0], want)
	}
	switch r {
	case 1:
		return c.Send(ctx, 0, collective.I32(msg))
	case 0:
		if err := req.Wait(ctx); err != nil {
			return fmt.Errorf("rank 0 round %d: recv: %w", round, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(msg) {
			return fmt.Errorf("rank 0 round %d received %v, want %v", round, got, msg)
		}
	}
	return nil
}
