package transport

import (
	"hash/crc32"
	"io"
)

// lender is a connection that can lend the bytes it received in place instead of copying them
// out (transport/shm.Pipe). The stream endpoint reads the frame of a payload it may lend from
// such a connection directly, not through its read buffer, so that the payload still lies in
// the connection's memory when a RecvBorrow waits for it: it is queued lent, and RecvBorrow
// hands the lent bytes to the collective, which reduces them where they lie (one copy fewer
// than through a pooled buffer). Other frames go through the read buffer.
type lender interface {
	io.Reader
	// WaitReadable waits until bytes can be read, without taking any.
	WaitReadable() (eof bool, err error)
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
	if p.lend == nil || p.br.Buffered() > 0 || !p.lendable(f) {
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

// readLender fills dst from a lending connection: first from what the read buffer holds, then
// from the connection directly, so that a frame never leaves the start of the next one in the
// read buffer, where it could not be lent. It makes room before each piece (see makeRoom) and
// updates crc when sum is set.
func (p *streamPeer) readLender(dst []byte, crc uint32, sum bool) (int, uint32, error) {
	piece := max(p.lend.LendMax()/2, 1)
	off := 0
	for off < len(dst) {
		end := min(off+piece, len(dst))
		var src io.Reader = p.lend
		if b := p.br.Buffered(); b > 0 {
			src, end = p.br, min(end, off+b)
		}
		p.makeRoom(end - off)
		n, err := io.ReadFull(src, dst[off:end])
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

// lenderOf returns c as a lender, and the smallest payload it lends, when c lends payloads
// of lendMin bytes (StreamOptions.LendMin) or more; nil when it lends none that large.
func lenderOf(c io.ReadWriteCloser, lendMin int) (lender, int) {
	if lendMin == 0 {
		lendMin = DefaultLendMin
	}
	l, ok := c.(lender)
	if !ok || lendMin < 0 || l.LendMax() < lendMin {
		return nil, 0
	}
	return l, lendMin
}

// lendable reports whether the payload of f may be lent by the connection.
func (p *streamPeer) lendable(f *FrameHeader) bool {
	n := int(f.RawLen)
	return f.Codec == CodecNone && n > 0 && n >= p.lendMin && n <= p.lend.LendMax()
}

// readHeader reads the next frame header into p.rhdr. The header of a frame whose payload
// may be lent is read from the lending connection itself, so that the read buffer does not
// take the start of its payload (which then lies at the connection's read position, see
// lendPayload); it is recognised by peeking at it in the connection while the read buffer is
// empty. Every other header goes through the read buffer. The error is the read's own.
func (p *streamPeer) readHeader() error {
	if p.lend == nil {
		_, err := io.ReadFull(p.br, p.rhdr[:])
		return err
	}
	p.makeRoom(FrameHeaderSize)
	if p.br.Buffered() == 0 && p.peekLendable() {
		_, err := io.ReadFull(p.lend, p.rhdr[:])
		return err
	}
	_, err := io.ReadFull(p.br, p.rhdr[:])
	return err
}

// peekLendable waits for the next bytes of the lending connection and reports whether they
// are the whole header of a frame whose payload may be lent. Any failure is reported by the
// read that follows.
func (p *streamPeer) peekLendable() bool {
	if eof, err := p.lend.WaitReadable(); eof || err != nil {
		return false
	}
	if !p.lend.PeekInto(p.rhdr[:]) {
		return false
	}
	e := p.ep
	f, err := DecodeFrameHeader(e.rank, p.peer, p.rhdr[:], e.opts.MaxMessage, e.tab)
	return err == nil && p.lendable(&f)
}

// buffered is how many bytes the read buffer holds.
func (p *streamPeer) buffered() int { return p.br.Buffered() }

// peekHeader returns the next frame header's bytes without taking them, or nil when they have
// not all arrived. rtok must be held.
func (p *streamPeer) peekHeader() ([]byte, error) {
	if p.lend != nil && p.br.Buffered() == 0 {
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
