package service

import (
	"context"

	"github.com/hetsync/hetsync/transport"
)

// Mailbox is a service of one-way messages that both sides expect in an order they both know:
// a rank receives from a peer when its protocol says the next message is due, so no reader
// goroutine runs and nothing needs shutting down. A message of another operation than the one
// expected is an error naming both (the ranks are at different steps of the protocol).
type Mailbox struct {
	id ident
}

// NewMailbox is the mailbox service called name on ep, with ops naming its operations.
func NewMailbox(ep transport.Endpoint, name string, ops []string) (*Mailbox, error) {
	id, err := newIdent(ep, name, ops)
	if err != nil {
		return nil, err
	}
	return &Mailbox{id: id}, nil
}

// Channel is the mailbox's channel (ChannelOf its name).
func (b *Mailbox) Channel() transport.Channel { return b.id.ch }

// Send sends m to rank to. It returns when m.Body may be reused.
func (b *Mailbox) Send(ctx context.Context, to int, m Msg) error {
	return b.id.send(ctx, to, kindPost, m)
}

// Recv receives the next message from rank from into buf; it must be operation op. The
// returned Msg's Body is buf's prefix.
func (b *Mailbox) Recv(ctx context.Context, from int, op uint8, buf []byte) (Msg, error) {
	m, err := b.recv(ctx, from, "receive "+b.id.opName(op), buf)
	if err == nil && m.Op != op {
		return Msg{}, b.id.errorf(from, "receive "+b.id.opName(op), "got %s: the ranks are at different steps of the protocol", b.id.opName(m.Op))
	}
	return m, err
}

// RecvAny receives the next message from rank from into buf, whatever its operation: for a
// protocol whose next step depends on what the peer sent (a probe, or the end of probing).
func (b *Mailbox) RecvAny(ctx context.Context, from int, buf []byte) (Msg, error) {
	return b.recv(ctx, from, "receive", buf)
}

func (b *Mailbox) recv(ctx context.Context, from int, what string, buf []byte) (Msg, error) {
	h, n, err := b.id.ep.RecvAny(ctx, from, b.id.ch, buf)
	if err != nil {
		return Msg{}, b.id.wrap(from, what, err)
	}
	k, m, err := b.id.decode(from, h, buf[:n])
	switch {
	case err != nil:
		return Msg{}, err
	case k != kindPost:
		return Msg{}, b.id.errorf(from, what, "got a %s, a mailbox carries one-way messages only", k)
	case int(m.Op) >= len(b.id.ops):
		return Msg{}, b.id.errorf(from, what, "got operation %d, the service has %d", m.Op, len(b.id.ops))
	}
	return m, nil
}

// OpName is the name of operation op, for messages.
func (b *Mailbox) OpName(op uint8) string { return b.id.opName(op) }

// largeChunk bounds one message of SendLarge, well under any transport's frame limit.
const largeChunk = 1 << 20

// SendLarge sends data to rank to as operation op, however long: its length, then chunks of
// at most 1 MiB, which RecvLarge reassembles.
func (b *Mailbox) SendLarge(ctx context.Context, to int, op uint8, data []byte) error {
	m := Msg{Op: op, Arg: uint64(len(data))}
	if err := b.Send(ctx, to, m); err != nil {
		return err
	}
	for seg := uint32(1); len(data) > 0; seg++ {
		c := min(len(data), largeChunk)
		m.Aux, m.Body = seg, data[:c]
		if err := b.Send(ctx, to, m); err != nil {
			return err
		}
		data = data[c:]
	}
	return nil
}

// RecvLarge receives what SendLarge sent from rank from as op. A peer that announces more than
// limit bytes is an error, so that a corrupt length cannot make this rank allocate without
// bound.
func (b *Mailbox) RecvLarge(ctx context.Context, from int, op uint8, limit uint64) ([]byte, error) {
	var head [8]byte
	m, err := b.Recv(ctx, from, op, head[:])
	if err != nil {
		return nil, err
	}
	if m.Arg > limit {
		return nil, b.id.errorf(from, "receive "+b.id.opName(op), "the peer announces %d bytes, more than the %d expected", m.Arg, limit)
	}
	data := make([]byte, m.Arg)
	for off, seg := 0, uint32(1); off < len(data); seg++ {
		c, err := b.Recv(ctx, from, op, data[off:min(len(data), off+largeChunk)])
		if err != nil {
			return nil, err
		}
		if c.Aux != seg || len(c.Body) == 0 {
			return nil, b.id.errorf(from, "receive "+b.id.opName(op), "chunk %d of %d bytes, expected chunk %d", c.Aux, len(c.Body), seg)
		}
		off += len(c.Body)
	}
	return data, nil
}
