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

// hostRow is a decorator that reports the hosts of a job: it stands for the p2p endpoint's
// proof, with a liveness record for every peer.
type hostRow struct {
	transport.Endpoint
	row []bool
	act transport.Activity
}

func (e *hostRow) Unwrap() transport.Endpoint { return e.Endpoint }
func (e *hostRow) SameHost() []bool           { return e.row }
func (e *hostRow) LargeSegmentBytes() int     { return 4 << 20 }
func (e *hostRow) Activity() *transport.Activity {
	return &e.act
}
func (e *hostRow) Peer(peer int) transport.PeerState {
	return transport.PeerState{RTT: time.Duration(peer+1) * time.Millisecond}
}

// TestSubEndpointUnwrap: through a sub-communicator's endpoint, transport.As finds what names
// no rank as the job's endpoint has it, what names ranks in the sub-communicator's ranks, and
// no arena (the job's serves the job's own communicator).
func TestSubEndpointUnwrap(t *testing.T) {
	eps := transport.NewMemJobArena(4, 1<<20)
	defer transport.CloseAll(eps)
	job := &hostRow{Endpoint: eps[1], row: []bool{true, true, false, false}}
	sub := newSubEndpoint(job, []int{3, 1, 0}, 1, chanSubComm)
	if got := transport.SameHost(sub); fmt.Sprint(got) != "[false true true]" {
		t.Errorf("SameHost of the sub-communicator's ranks 3, 1, 0 = %v", got)
	}
	if got := transport.LargeSegment(sub); got != 4<<20 {
		t.Errorf("LargeSegment through the sub-communicator = %d, want the job's %d", got, 4<<20)
	}
	live, ok := transport.LivenessOf(sub)
	if !ok {
		t.Fatal("no Liveness through the sub-communicator")
	}
	if live.Peer(0).RTT != 4*time.Millisecond || live.Activity() != &job.act {
		t.Errorf("Liveness through the sub-communicator: peer 0 (job rank 3) RTT %v, want 4ms and the job's record", live.Peer(0).RTT)
	}
	if transport.HostArena(job) == nil {
		t.Fatal("the job has no arena")
	}
	if a := transport.HostArena(sub); a != nil {
		t.Errorf("HostArena through the sub-communicator = %v, want none", a)
	}
	if _, ok := sub.(subChanneler); !ok {
		t.Error("the sub-communicator's endpoint does not say its channel")
	}
}
