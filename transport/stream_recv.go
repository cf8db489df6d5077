package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The stream endpoint's receive side: matching a receive with what the peer's reader queued,
// or with a frame it reads straight into the caller's buffer, and lending queued payloads.

func (e *streamEndpoint) Recv(ctx context.Context, from int, want Header, buf []byte) (int, error) {
	got, n, err := e.recv(ctx, from, want, false, buf)
	return checkedRecv(e.rank, from, want, got, n, err)
}

func (e *streamEndpoint) RecvAny(ctx context.Context, from int, ch Channel, buf []byte) (Header, int, error) {
	return e.recv(ctx, from, Header{Channel: ch}, true, buf)
}

// Borrower is implemented by endpoints that can lend a received message's payload instead of
// copying it into a caller's buffer. The collectives use it for segments they reduce: the
// payload is read once from the socket into a pooled buffer and reduced from there, while the
// endpoint's reader already reads the next segment; on a shared-memory pipe, a payload of
// StreamOptions.LendMin bytes or more is not copied out at all, and the collective reduces it where it lies
// in the pipe's ring.
type Borrower interface {
	// RecvBorrow receives the next message from `from` on channel ch, like RecvAny, and returns
	// its header and payload. The payload belongs to the endpoint, is read-only and may be
	// unaligned, and stays valid until ReleaseBorrowed(from, ch) or the next RecvBorrow on the
	// same peer and channel, which releases it implicitly. Release it before waiting for
	// another message from the same peer: a payload lent from a pipe's ring keeps the peer
	// from writing over it, and the peer may need that room for the message waited for.
	RecvBorrow(ctx context.Context, from int, ch Channel) (Header, []byte, error)
	// ReleaseBorrowed gives the payload of the last RecvBorrow from (from, ch) back.
	ReleaseBorrowed(from int, ch Channel)
}

var _ Borrower = (*streamEndpoint)(nil)

func (e *streamEndpoint) RecvBorrow(ctx context.Context, from int, ch Channel) (Header, []byte, error) {
	if err := checkPeer(e.rank, e.size, from, "recv"); err != nil {
		return Header{}, nil, err
	}
	if from == e.rank {
		m, err := e.selfBox(ch).take(ctx, e.closed, nil)
		if err != nil {
			return Header{}, nil, e.recvErr(e.rank, ch, err)
		}
		e.stats.msgsRecv.Add(1)
		e.stats.bytesRecv.Add(uint64(len(m.payload)))
		return m.h, m.payload, nil
	}
	e.ReleaseBorrowed(from, ch)
	h, _, m, err := e.recvMsg(ctx, from, Header{Channel: ch}, true, nil, true)
	if err != nil {
		return h, nil, err
	}
	p := e.peers[from].Load()
	switch {
	case m.lent != nil:
		p.mu.Lock()
		p.inbox(ch).lent = m.lent
		p.mu.Unlock()
		return h, m.lent, nil
	case m.buf != nil:
		p.mu.Lock()
		p.inbox(ch).borrowed = m.buf
		p.mu.Unlock()
		return h, m.buf.b[:m.n], nil
	}
	return h, nil, nil
}

func (e *streamEndpoint) ReleaseBorrowed(from int, ch Channel) {
	if from < 0 || from >= e.size || from == e.rank {
		return
	}
	p := e.peers[from].Load()
	if p == nil {
		return
	}
	p.mu.Lock()
	ib := p.inboxes[ch]
	var (
		pb   *pooledBuf
		lent []byte
	)
	if ib != nil {
		pb, ib.borrowed = ib.borrowed, nil
		lent, ib.lent = ib.lent, nil
	}
	p.mu.Unlock()
	e.pool.put(pb)
	if lent != nil {
		p.lend.Return(lent)
	}
}

func (e *streamEndpoint) recvErr(from int, ch Channel, err error) error {
	return &PeerError{Rank: e.rank, Peer: from, Op: fmt.Sprintf("recv on channel %d", ch), Err: err}
}

func (e *streamEndpoint) recv(ctx context.Context, from int, want Header, matchAny bool, buf []byte) (Header, int, error) {
	if err := checkPeer(e.rank, e.size, from, "recv"); err != nil {
		return Header{}, 0, err
	}
	if from == e.rank {
		return e.recvSelf(ctx, want.Channel, buf)
	}
	h, n, _, err := e.recvMsg(ctx, from, want, matchAny, buf, false)
	return h, n, err
}

// recvMsg waits for the next message from `from` on want.Channel. With borrow=false it lands in
// buf (directly from the socket when the receiver is waiting first); with borrow=true buf is
// nil, and a queued message is returned as it is, pooled buffer and all, for the caller to own.
// A borrowed empty message comes back as a zero pending.
func (e *streamEndpoint) recvMsg(ctx context.Context, from int, want Header, matchAny bool, buf []byte, borrow bool) (Header, int, pending, error) {
	p, err := e.link(ctx, from)
	if err != nil {
		return Header{}, 0, pending{}, e.recvErr(from, want.Channel, err)
	}
	p.mu.Lock()
	ib := p.inbox(want.Channel)
	w := &ib.w
	for {
		if m, ok := ib.pop(); ok {
			if m.lent != nil {
				p.queuedLends--
			}
			p.mu.Unlock()
			if borrow {
				if m.buf == nil && m.lent == nil {
					return m.h, 0, pending{}, nil
				}
				return m.h, m.n, m, nil
			}
			h, n, err := e.take(from, m, buf)
			return h, n, pending{}, err
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return Header{}, 0, pending{}, err
		}
		if w.state != wIdle {
			p.mu.Unlock()
			return Header{}, 0, pending{}, e.recvErr(from, want.Channel,
				errors.New("another Recv is already waiting on this peer and channel"))
		}
		if err := ctx.Err(); err != nil {
			p.mu.Unlock()
			return Header{}, 0, pending{}, e.recvErr(from, want.Channel, err)
		}
		w.state, w.buf, w.want, w.matchAny, w.borrow = wPosted, buf, want, matchAny, borrow
		p.mu.Unlock()
		if p.sock != nil {
			p.poll(ctx, w)
		}

		select {
		case <-w.wake:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			switch w.state {
			case wPosted:
				w.state, w.buf = wIdle, nil
				p.mu.Unlock()
				return Header{}, 0, pending{}, e.recvErr(from, want.Channel, ctx.Err())
			case wFilling:
				// The reader is writing into buf; stop it before buf goes back to the caller.
				w.state = wAborting
				p.interruptRead()
			}
			p.mu.Unlock()
			<-w.wake
			p.mu.Lock()
			if w.state != wDone {
				p.mu.Unlock()
				return Header{}, 0, pending{}, e.recvErr(from, want.Channel, ctx.Err())
			}
		}
		if w.state == wDone {
			h, n := w.h, w.n
			w.state, w.buf = wIdle, nil
			p.mu.Unlock()
			return h, n, pending{}, nil
		}
		// Woken because a message was queued or the link failed: look again.
	}
}

// interruptRead makes the reader's blocked Read return; p.mu must be held.
func (p *streamPeer) interruptRead() {
	if p.rdl != nil && p.rdl.SetReadDeadline(time.Unix(1, 0)) == nil {
		return
	}
	// No deadlines on this connection: closing it is the only way to stop the read.
	if p.err == nil {
		p.err = &PeerError{Rank: p.ep.rank, Peer: p.peer, Op: "recv",
			Err: errors.New("connection closed: a Recv was cancelled in the middle of a message and the connection has no read deadlines")}
	}
	p.conn.Close()
}

// take copies a queued message into buf and recycles its buffer.
func (e *streamEndpoint) take(from int, m pending, buf []byte) (Header, int, error) {
	defer e.pool.put(m.buf)
	if m.lent != nil {
		defer e.peers[from].Load().lend.Return(m.lent)
	}
	if m.n > len(buf) {
		return m.h, 0, &PeerError{Rank: e.rank, Peer: from, Op: "recv " + m.h.String(),
			Err: fmt.Errorf("message of %d bytes does not fit the %d-byte buffer", m.n, len(buf))}
	}
	src := m.lent
	if m.buf != nil {
		src = m.buf.b[:m.n]
	}
	return m.h, copy(buf, src), nil
}

func (e *streamEndpoint) recvSelf(ctx context.Context, ch Channel, buf []byte) (Header, int, error) {
	m, err := e.selfBox(ch).take(ctx, e.closed, nil)
	if err != nil {
		return Header{}, 0, e.recvErr(e.rank, ch, err)
	}
	return deliver(e.rank, e.rank, m, buf, &e.stats)
}
