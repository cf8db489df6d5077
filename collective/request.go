package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// turns orders a Comm's calls: each gets the next sequence number when it is issued and runs
// when every earlier call has finished. Sequence numbers are the order of issue, which is what
// the ranks agree on; the order in which goroutines happen to be scheduled is not.
//
// A call issued while no other call runs or waits takes the turn at once, with no allocation
// and no hand-off between goroutines, so a program that only makes blocking calls pays nothing
// for the ordering.
type turns struct {
	mu     sync.Mutex
	issued uint64     // sequence number of the next call
	busy   bool       // some call has the turn
	queue  []*Request // issued calls waiting for the turn, oldest first
}

// issue gives a call its sequence number. It returns a nil Request when the call has the turn
// now; otherwise it queues req (a new one when req is nil) and returns it, and the call runs
// once req.turn is closed.
func (t *turns) issue(req *Request) (uint64, *Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.issued
	t.issued++
	if !t.busy {
		t.busy = true
		return seq, nil
	}
	if req == nil {
		req = &Request{turn: make(chan struct{})}
	}
	req.seq = seq
	t.queue = append(t.queue, req)
	return seq, req
}

// awaitTurn waits until the queued call req may run. When ctx ends first the call gives up its
// place without running: its peers still expect it, so whoever passes the turn to it breaks
// the communicator and tells them (see passTurn).
func (c *Comm) awaitTurn(ctx context.Context, kind collKind, req *Request) error {
	select {
	case <-req.turn:
		return nil
	case <-ctx.Done():
	}
	c.turns.mu.Lock()
	defer c.turns.mu.Unlock()
	select {
	case <-req.turn:
		// The turn came meanwhile: run the call, which fails at once on the ended context
		// and tells the peers.
		return nil
	default:
	}
	req.abandoned = fmt.Errorf("%s: %v #%d (%s): gave up waiting for the earlier calls on this communicator: %w",
		c.who, kind, req.seq, c.algName, context.Cause(ctx))
	return req.abandoned
}

// passTurn ends the running call's turn and hands it to the next queued call. A queued call
// whose caller gave up waiting is failed here, in its place in the sequence.
func (c *Comm) passTurn() {
	t := &c.turns
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			t.busy = false
			t.queue = t.queue[:0]
			t.mu.Unlock()
			return
		}
		next := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		if next.abandoned == nil {
			close(next.turn)
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		if c.broken == nil {
			c.broken = next.abandoned
		}
		c.abort(next.seq, next.abandoned)
	}
}

// Request is a non-blocking collective call in flight (MPI_Request, torch's Work). The call
// reads and writes its buffers until it completes: do not touch them before Wait returns or
// Test reports it done.
type Request struct {
	c    *Comm
	kind collKind
	seq  uint64
	turn chan struct{} // closed when the call may run (queued calls only)
	done chan struct{} // closed when the call has completed; err is set then
	err  error
	// abandoned is set (under turns.mu) when a blocking call's caller stopped waiting for its
	// turn.
	abandoned error
}

// start issues a non-blocking call: it takes its sequence number now and runs on a goroutine
// of its own at its turn. A call whose arguments are invalid completes at once with that error
// and takes no sequence number, like its blocking form.
func (c *Comm) start(ctx context.Context, argErr error, kind collKind, buf, aux Buffer, op ReduceOp, root int) *Request {
	return c.startCall(argErr, kind, func(seq uint64) error {
		return c.exec(ctx, seq, kind, buf, aux, op, root)
	})
}

// startCall is start for a call that run executes once it has the turn (a compressed
// allreduce sets up its codec around exec).
func (c *Comm) startCall(argErr error, kind collKind, run func(seq uint64) error) *Request {
	r := &Request{c: c, kind: kind, done: make(chan struct{})}
	if argErr != nil {
		r.err = argErr
		close(r.done)
		return r
	}
	r.turn = make(chan struct{})
	seq, queued := c.turns.issue(r)
	r.seq = seq
	go func() {
		if queued != nil {
			<-r.turn
		}
		r.err = run(seq)
		c.passTurn()
		close(r.done)
	}()
	return r
}

// Wait blocks until the call completes and returns its error. When ctx ends first Wait returns
// ctx's error and the call goes on (its own context, the one it was issued with, and the
// communicator's timeout bound it): Wait or Test again later.
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return errors.New("collective: Wait on a nil Request")
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for %v #%d (%s): %w", r.c.who, r.kind, r.seq, r.c.algName, context.Cause(ctx))
	}
}

// Test reports whether the call has completed, and its error if so. It never blocks.
func (r *Request) Test() (done bool, err error) {
	if r == nil {
		return true, errors.New("collective: Test on a nil Request")
	}
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Done is closed when the call has completed, for use in a select.
func (r *Request) Done() <-chan struct{} { return r.done }

// Seq is the call's sequence number on its communicator (the "#n" of its errors).
func (r *Request) Seq() uint64 { return r.seq }

// WaitAll waits for every request and returns their errors joined.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var errs []error
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// IAllReduce is the non-blocking AllReduce.
func (c *Comm) IAllReduce(ctx context.Context, buf Buffer, op ReduceOp) *Request {
	return c.start(ctx, c.checkArgs(kindAllReduce, buf, op, 0), kindAllReduce, buf, Buffer{}, op, 0)
}

// IReduceScatter is the non-blocking ReduceScatter.
func (c *Comm) IReduceScatter(ctx context.Context, buf Buffer, op ReduceOp) *Request {
	return c.start(ctx, c.checkArgs(kindReduceScatter, buf, op, 0), kindReduceScatter, buf, Buffer{}, op, 0)
}

// IAllGather is the non-blocking AllGather.
func (c *Comm) IAllGather(ctx context.Context, buf Buffer) *Request {
	return c.start(ctx, c.checkArgs(kindAllGather, buf, Sum, 0), kindAllGather, buf, Buffer{}, 0, 0)
}

// IBroadcast is the non-blocking Broadcast.
func (c *Comm) IBroadcast(ctx context.Context, buf Buffer, root int) *Request {
	return c.start(ctx, c.checkArgs(kindBroadcast, buf, Sum, root), kindBroadcast, buf, Buffer{}, 0, root)
}

// IReduce is the non-blocking Reduce.
func (c *Comm) IReduce(ctx context.Context, buf Buffer, op ReduceOp, root int) *Request {
	return c.start(ctx, c.checkArgs(kindReduce, buf, op, root), kindReduce, buf, Buffer{}, op, root)
}

// IBarrier is the non-blocking Barrier: it completes once every rank has entered it.
func (c *Comm) IBarrier(ctx context.Context) *Request {
	return c.start(ctx, nil, kindBarrier, Buffer{DType: Int32}, Buffer{}, 0, 0)
}

// IAllToAll is the non-blocking AllToAll.
func (c *Comm) IAllToAll(ctx context.Context, send, recv Buffer) *Request {
	return c.start(ctx, c.checkAllToAll(send, recv), kindAllToAll, recv, send, 0, 0)
}
