package collective

import (
	"context"

	"github.com/hetsync/hetsync/transport"
)

// p2pLane is one direction of the point-to-point messages with one peer: each message gets
// the next sequence number when it is issued and reaches the transport once the non-blocking
// message issued before it has finished, so the transport sees them in order and never has two
// receives from one peer at once. Guarded by Comm.p2pMu.
//
// The messages travel on a channel of their own, never on the collectives': the transport
// keeps one FIFO per (peer, channel), and a receive pending there while a collective runs
// would take that collective's message from the same peer (or the collective its).
type p2pLane struct {
	seq  uint64
	last chan struct{} // done of the last non-blocking message issued, nil before the first
}

// p2pIssue gives a message of lane its sequence number and returns what it must wait for
// first; done, when not nil, is what the next message will wait for.
func (c *Comm) p2pIssue(lane *p2pLane, done chan struct{}) (uint64, chan struct{}) {
	c.p2pMu.Lock()
	defer c.p2pMu.Unlock()
	seq, prev := lane.seq, lane.last
	lane.seq++
	if done != nil {
		lane.last = done
	}
	return seq, prev
}

// ISend is the non-blocking Send.
func (c *Comm) ISend(ctx context.Context, to int, buf Buffer) *Request {
	return c.startP2P(c.checkPeer("send", to, buf), &c.p2pSend, to, func(seq uint64, prev chan struct{}) error {
		return c.send(ctx, to, seq, prev, buf)
	})
}

// IRecv is the non-blocking Recv.
func (c *Comm) IRecv(ctx context.Context, from int, buf Buffer) *Request {
	return c.startP2P(c.checkPeer("recv", from, buf), &c.p2pRecv, from, func(seq uint64, prev chan struct{}) error {
		return c.recv(ctx, from, seq, prev, buf)
	})
}

func (c *Comm) startP2P(argErr error, lanes *[]p2pLane, peer int, do func(seq uint64, prev chan struct{}) error) *Request {
	r := &Request{c: c, kind: kindPointToPoint, done: make(chan struct{})}
	if argErr != nil {
		r.err = argErr
		close(r.done)
		return r
	}
	seq, prev := c.p2pIssue(&(*lanes)[peer], r.done)
	r.seq = seq
	go func() {
		r.err = do(seq, prev)
		close(r.done)
	}()
	return r
}

// after waits for the message issued before this one on its lane.
func after(ctx context.Context, prev chan struct{}) error {
	if prev == nil {
		return nil
	}
	select {
	case <-prev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Comm) send(ctx context.Context, to int, seq uint64, prev chan struct{}, buf Buffer) error {
	ctx, cancel, limit := c.p2pLimit(ctx)
	defer cancel()
	err := after(ctx, prev)
	if err == nil {
		h := transport.Header{Channel: chanP2P, Codec: c.codecFor(buf.DType), Seq: seq,
			Op: c.signature(kindPointToPoint, buf.DType, 0, buf.Len(), c.Rank())}
		err = c.ep.Send(ctx, to, h, buf.Bytes)
	}
	if err != nil {
		return c.p2pErr(ctx, "send", seq, to, limit, err)
	}
	return nil
}

func (c *Comm) recv(ctx context.Context, from int, seq uint64, prev chan struct{}, buf Buffer) error {
	ctx, cancel, limit := c.p2pLimit(ctx)
	defer cancel()
	err := after(ctx, prev)
	if err == nil {
		h := transport.Header{Channel: chanP2P, Seq: seq,
			Op: c.signature(kindPointToPoint, buf.DType, 0, buf.Len(), from)}
		err = c.recvExact(ctx, from, h, buf.Bytes)
	}
	if err != nil {
		return c.p2pErr(ctx, "recv", seq, from, limit, err)
	}
	return nil
}
