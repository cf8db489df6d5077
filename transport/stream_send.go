package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"time"
)

// The stream endpoint's send side: framing a message onto a peer's connection (or into its
// own mailbox for a send to self).

func (e *streamEndpoint) Send(ctx context.Context, to int, h Header, payload []byte) error {
	if err := checkPeer(e.rank, e.size, to, "send"); err != nil {
		return err
	}
	if e.isClosed() {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: errEndpointClosed}
	}
	if err := ctx.Err(); err != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	if !h.Codec.Known() {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: fmt.Errorf("unknown codec %d", h.Codec)}
	}
	if len(payload) > e.opts.MaxMessage {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(),
			Err: fmt.Errorf("payload of %d bytes exceeds the %d-byte message limit", len(payload), e.opts.MaxMessage)}
	}
	if to == e.rank {
		return e.sendSelf(h, payload)
	}
	p, err := e.link(ctx, to)
	if err != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.werr != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: p.werr}
	}
	wire := payload
	if h.Codec != CodecNone && len(payload) > 0 {
		enc, err := p.wcodec.Encode(h.Codec, p.wenc, payload)
		if err != nil {
			return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
		}
		p.wenc = enc
		wire = enc
		if len(wire) > e.opts.MaxMessage {
			return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(),
				Err: fmt.Errorf("%v payload of %d bytes exceeds the %d-byte message limit", h.Codec, len(wire), e.opts.MaxMessage)}
		}
	}
	f := FrameHeader{Header: h, RawLen: uint32(len(payload)), WireLen: uint32(len(wire))}
	if e.opts.Checksum {
		f.Flags |= FlagChecksum
		f.PayloadCRC = crc32.Checksum(wire, e.tab)
	}
	MarshalFrameHeader(p.whdr[:], &f, e.tab)

	var stop func() bool
	var interrupted chan struct{} // closed once the cancellation handler has moved the deadline
	if p.wdl != nil {
		if dl, ok := ctx.Deadline(); ok {
			if !dl.Equal(p.wdeadline) {
				p.wdl.SetWriteDeadline(dl)
				p.wdeadline = dl
			}
		} else {
			if !p.wdeadline.IsZero() {
				p.wdl.SetWriteDeadline(time.Time{})
				p.wdeadline = time.Time{}
			}
			if ctx.Done() != nil {
				// Cancellable without a deadline: interrupt the write when it is cancelled.
				// This allocates; contexts with deadlines (or none) do not.
				interrupted = make(chan struct{})
				stop = context.AfterFunc(ctx, func() {
					p.wdl.SetWriteDeadline(time.Unix(1, 0))
					close(interrupted)
				})
			}
		}
	}
	n, err := p.writeFrame(wire)
	if stop != nil && !stop() {
		// The cancellation fired and moved the deadline; put it back once the handler is done
		// (it may still be running, and its past deadline landing after this reset would fail
		// the next write on the connection).
		<-interrupted
		p.wdl.SetWriteDeadline(time.Time{})
		p.wdeadline = time.Time{}
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The write deadline can fire a moment before the context's own timer.
			if ctx.Err() != nil {
				err = ctx.Err()
			} else if _, ok := ctx.Deadline(); ok {
				err = context.DeadlineExceeded
			}
		}
		if e.isClosed() {
			err = errEndpointClosed
		} else if ferr := p.failure(); ferr != nil {
			// The peer was failed (its heartbeats stopped, its stream broke) and its
			// connection closed: say why, rather than "use of closed network connection".
			err = ferr
		}
		if n > 0 {
			// Part of the frame is on the wire: the stream is out of step for good. Close it
			// so that the peer sees a truncated stream instead of waiting for the rest.
			p.werr = fmt.Errorf("connection unusable after a partial frame: %w", err)
			p.conn.Close()
		}
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	e.stats.msgsSent.Add(1)
	e.stats.bytesSent.Add(uint64(len(payload)))
	e.stats.wireSent.Add(uint64(FrameHeaderSize + len(wire)))
	return nil
}

// smallFrame is the payload size up to which a frame on a non-vectored connection is copied
// into one buffer and written with one call.
const smallFrame = 32 << 10

// writeFrame writes p.whdr and wire; p.wmu must be held. It returns how many bytes went out.
func (p *streamPeer) writeFrame(wire []byte) (int64, error) {
	if p.raw != nil {
		return p.raw.WriteFrame(p.whdr[:], wire)
	}
	if p.vectored {
		p.wvec[0] = p.whdr[:]
		p.wvec[1] = wire
		p.wbufs = p.wvec[:]
		if len(wire) == 0 {
			p.wbufs = p.wvec[:1]
		}
		n, err := p.wbufs.WriteTo(p.conn)
		p.wvec[0], p.wvec[1], p.wbufs = nil, nil, nil
		return n, err
	}
	if len(wire) <= smallFrame {
		p.wsmall = append(append(p.wsmall[:0], p.whdr[:]...), wire...)
		n, err := p.conn.Write(p.wsmall)
		return int64(n), err
	}
	n, err := p.conn.Write(p.whdr[:])
	if err != nil {
		return int64(n), err
	}
	m, err := p.conn.Write(wire)
	return int64(n + m), err
}

func (e *streamEndpoint) selfBox(ch Channel) *mailbox { return mailboxOf(&e.selfMu, e.self, ch) }

func (e *streamEndpoint) sendSelf(h Header, payload []byte) error {
	if err := post(e.selfBox(h.Channel), &e.stats, h, payload); err != nil {
		return &PeerError{Rank: e.rank, Peer: e.rank, Op: "send " + h.String(), Err: err}
	}
	return nil
}
