package transport

import (
	"hash/crc32"
	"io"
)

// lender is a connection that can lend the bytes it received in place instead of copying them
// out (transport/shm.Pipe). The stream endpoint reads such a connection without a read
// buffer, so that an uncompressed payload still lies in the connection's memory when nobody
// waits for it with a buffer: it is queued lent, and RecvBorrow hands the lent bytes to the
// collective, which reduces them where they lie (one copy fewer than through a pooled buffer).
type lender interface {
	io.Reader
	// LendMax is the largest lend, and the most that may be lent at once; 0: none.
	LendMax() int
	// Held is how many bytes already read the connection may not reuse yet because of lends.
	Held() int
	// Lend takes the next n bytes, waiting for all of them, and lends them until Return; nil
	// when it declines (too large, too much held), having taken nothing.
	Lend(n int) ([]byte, error)
	Return(b []byte)
	// PeekInto copies the next len(b) bytes without taking them, when they have arrived.
	PeekInto(b []byte) bool
}

// lendPayload queues the uncompressed payload of f lent by the connection, when it lends and
// a RecvBorrow already waits for it. It reports whether it did. A payload that nobody waits for
// yet is copied out as before: the receiver is busy, and the reader goroutine's copy overlaps
// its work, where a lent payload would wait in the ring and hold the producer back.
func (p *streamPeer) lendPayload(f *FrameHeader) (bool, error) {
	n := int(f.RawLen)
	if p.lend == nil || n == 0 || n > p.lend.LendMax() {
		return false, nil
	}
	p.mu.Lock()
	ib := p.inbox(f.Channel)
	waits := ib.w.state == wPosted && ib.w.borrow && ib.empty()
	p.mu.Unlock()
	if !waits {
		return false, nil
	}
	p.makeRoom(n)
	b, err := p.lend.Lend(n)
	if err != nil {
		return false, p.payloadErr(err)
	}
	if b == nil {
		return false, nil
	}
	if f.Flags&FlagChecksum != 0 {
		if err := checkCRC(p.ep.rank, p.peer, f, crc32.Update(0, p.ep.tab, b)); err != nil {
			p.lend.Return(b)
			return false, err
		}
	}
	p.ep.lent.Add(1)
	p.enqueuePending(ib, f, pending{h: f.Header, lent: b, n: n})
	return true, nil
}

// makeRoom is called before the reader takes k more bytes from a lending connection: when the
// bytes held by lends and k would exceed what the connection lends at once, the queued lent
// payloads, which no receiver holds, are copied into pooled buffers and given back. The
// producer then always has room for what the reader waits for, unless a receiver holds a
// borrowed payload (which it gives back without waiting for this peer).
func (p *streamPeer) makeRoom(k int) {
	if p.lend == nil || p.lend.Held()+k <= p.lend.LendMax() {
		return
	}
	p.unlendQueued()
}

// unlendQueued copies every queued lent payload into a pooled buffer and gives the lent bytes
// back to the connection.
func (p *streamPeer) unlendQueued() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queuedLends == 0 {
		return
	}
	for _, ib := range p.inboxes {
		for i := ib.head; i < len(ib.queue); i++ {
			m := &ib.queue[i]
			if m.lent == nil {
				continue
			}
			pb := p.ep.pool.get(m.n)
			copy(pb.b, m.lent)
			p.lend.Return(m.lent)
			m.buf, m.lent = pb, nil
		}
	}
	p.queuedLends = 0
}

// readLender fills dst from a lending connection, making room before each piece (see
// makeRoom) and updating crc when sum is set.
func (p *streamPeer) readLender(dst []byte, crc uint32, sum bool) (int, uint32, error) {
	piece := max(p.lend.LendMax()/2, 1)
	off := 0
	for off < len(dst) {
		end := min(off+piece, len(dst))
		p.makeRoom(end - off)
		n, err := io.ReadFull(p.rd, dst[off:end])
		if sum {
			crc = crc32.Update(crc, p.ep.tab, dst[off:off+n])
		}
		off += n
		if err != nil {
			return off, crc, err
		}
	}
	return off, crc, nil
}

// buffered is how many bytes the read buffer holds (none on a lending connection).
func (p *streamPeer) buffered() int {
	if p.br == nil {
		return 0
	}
	return p.br.Buffered()
}

// peekHeader returns the next frame header's bytes without taking them, or nil when they have
// not all arrived. rtok must be held.
func (p *streamPeer) peekHeader() ([]byte, error) {
	if p.lend != nil {
		if !p.lend.PeekInto(p.rhdr[:]) {
			return nil, nil
		}
		return p.rhdr[:], nil
	}
	hdr, err := p.br.Peek(FrameHeaderSize)
	if err != nil {
		return nil, p.readErr(err, "frame header")
	}
	return hdr, nil
}
