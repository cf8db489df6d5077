package collective

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// countingLender is a decorator that lends what the endpoint beneath it lends and counts
// the lends: it stands for any decorator between a communicator and the transport.
type countingLender struct {
	transport.Endpoint
	br    transport.Borrower
	lends atomic.Int64
}

func (e *countingLender) Unwrap() transport.Endpoint { return e.Endpoint }

func (e *countingLender) RecvBorrow(ctx context.Context, from int, ch transport.Channel) (transport.Header, []byte, error) {
	e.lends.Add(1)
	return e.br.RecvBorrow(ctx, from, ch)
}

func (e *countingLender) ReleaseBorrowed(from int, ch transport.Channel) {
	e.br.ReleaseBorrowed(from, ch)
}

// TestBorrowUnderDelayed: collectives over a straggler's endpoint (transport.Delayed, whose
// delays touch sends only) reduce received segments from the transport's lent buffers, as
// they do without it, over real libp2p hosts on loopback TCP; and so does a sub-communicator
// of such a job. The results are exact.
func TestBorrowUnderDelayed(t *testing.T) {
	const p = 3
	eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "borrow under delays", Security: p2p.SecurityNone,
		DataPath: p2p.DataPathTCP, Logger: slog.New(slog.DiscardHandler)}, nil)
	lenders := make([]*countingLender, p)
	delayed := make([]transport.Endpoint, p)
	for r, ep := range eps {
		br, ok := ep.(transport.Borrower)
		if !ok {
			t.Fatalf("rank %d: the p2p endpoint does not lend", r)
		}
		lenders[r] = &countingLender{Endpoint: ep, br: br}
		// A window that never ends, from the start: every send is delayed.
		d := transport.NewDelayed(lenders[r], time.Microsecond, []transport.DelayWindow{{From: 0, To: time.Hour}}, nil)
		d.Start(time.Now())
		delayed[r] = d
	}
	j := newJob(t, delayed, Options{Algorithm: "ring"})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	const n = 100003
	bufs := make([]Buffer, p)
	j.mustRun(t, "ring allreduce under delays", func(c *Comm) error {
		bufs[c.Rank()] = input(Float32, c.Rank(), n)
		return c.AllReduce(ctx, bufs[c.Rank()], Sum)
	})
	want := reference(Float32, Sum, p, n)
	for r := range bufs {
		if err := compare(bufs[r], want, 0, n); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, l := range lenders {
		if l.lends.Load() == 0 {
			t.Errorf("rank %d: the allreduce under transport.Delayed borrowed no received segment", r)
		}
		if d := delayed[r].(*transport.Delayed); d.DelayedSends() == 0 {
			t.Errorf("rank %d: no send was delayed", r)
		}
	}
	before := make([]int64, p)
	for r, l := range lenders {
		before[r] = l.lends.Load()
	}
	j.mustRun(t, "sub-communicator allreduce under delays", func(c *Comm) error {
		sub, err := c.Split(ctx, 0, -c.Rank())
		if err != nil {
			return err
		}
		if _, ok := sub.ep.(transport.Borrower); !ok {
			return fmt.Errorf("rank %d: the sub-communicator's endpoint does not lend", c.Rank())
		}
		buf := input(Float32, sub.Rank(), n)
		if err := sub.AllReduce(ctx, buf, Sum); err != nil {
			return err
		}
		return compare(buf, want, 0, n)
	})
	for r, l := range lenders {
		if l.lends.Load() == before[r] {
			t.Errorf("rank %d: the sub-communicator's allreduce borrowed no received segment", r)
		}
	}
}
