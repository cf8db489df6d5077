package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"time"
)

// The reader goroutine of a stream endpoint's peer: it reads and validates frames, queues them
// by channel or hands them to a waiting receive, and turns a broken connection into the
// peer's failure.

// readChunk bounds how much payload is read between checksum updates, so the checksum runs
// over bytes that are still in cache.
const readChunk = 512 << 10

func (p *streamPeer) readLoop() {
	defer p.ep.wg.Done()
	if p.sock != nil {
		p.pollingReadLoop()
		return
	}
	for {
		if err := p.readFrame(); err != nil {
			p.fail(err)
			return
		}
	}
}

// pollingReadLoop is the reader of a connection that receivers may poll: it waits for data
// without holding rtok, so that a polling receiver can read frames meanwhile, and holds rtok
// only while it reads one frame.
func (p *streamPeer) pollingReadLoop() {
	// arrived: the last wait found bytes (or the end of the stream), and no receiver has read
	// a frame since, so they are still there: read without looking again. polledAt is the
	// endpoint's count of polled frames when the wait began.
	eof, arrived := false, false
	var polledAt uint64
	for !p.dead.Load() {
		p.rtok.Lock()
		if p.dead.Load() {
			p.rtok.Unlock()
			return
		}
		if arrived && p.ep.polled.Load() != polledAt {
			arrived = false // a receiver read frames meanwhile: perhaps these bytes too
		}
		if !eof && !arrived && p.buffered() == 0 {
			// Wait without rtok, so that receivers may poll meanwhile. The wait returns at
			// once when bytes are already there.
			polledAt = p.ep.polled.Load()
			p.rtok.Unlock()
			if err := p.sock.waitReadable(); err != nil {
				p.fail(p.readErr(err, "between frames"))
				return
			}
			eof, arrived = p.sock.atEOF(), true
			continue
		}
		eof, arrived = false, false
		if err := p.readFrame(); err != nil {
			// Fail before another reader may take rtok: the failed frame's bytes are
			// consumed, and a poller reading on would deliver the frames after it (or read
			// out of sync) instead of the failure.
			p.fail(err)
			p.rtok.Unlock()
			return
		}
		p.rtok.Unlock()
	}
}

// poll is a receiver's wait before it sleeps: for up to Poll, it reads every frame that has
// fully arrived on the socket itself (its own goes straight into its buffer and signals w, as
// the reader goroutine would do), yielding the CPU between looks. It returns when w was
// signalled, ctx ended, the time is up, or the read side failed.
func (p *streamPeer) poll(ctx context.Context, w *waiter) {
	until := time.Now().Add(p.ep.opts.Poll)
	for len(w.wake) == 0 && !p.dead.Load() {
		if p.rtok.TryLock() {
			for len(w.wake) == 0 && !p.dead.Load() {
				ready, streaming, err := p.frameArrived()
				if streaming {
					// A large frame is coming in: the reader goroutine streams it into place
					// as it arrives, while polling would wait for all of it.
					p.rtok.Unlock()
					return
				}
				if err == nil && ready {
					err = p.readFrame()
					p.ep.polled.Add(1)
				}
				if err != nil {
					p.fail(err) // under rtok, as in pollingReadLoop
					p.rtok.Unlock()
					return
				}
				if !ready {
					break
				}
			}
			p.rtok.Unlock()
		}
		if len(w.wake) != 0 || ctx.Err() != nil || time.Now().After(until) {
			return
		}
		runtime.Gosched()
		yieldCPU()
	}
}

// poller looks at a connection without reading it, so that receivers may poll it (StreamOptions.Poll):
// sockets on Linux (sockPoll) and connections that count their unread bytes and wait for some
// without taking them, such as transport/shm's pipes (readWaiter).
type poller interface {
	// inq returns how many bytes wait to be read.
	inq() (int, error)
	// waitReadable parks until bytes wait (or the stream ended: atEOF) without reading any.
	waitReadable() error
	atEOF() bool
}

// readWaiter is a connection that can say how many bytes wait and wait for some without
// taking them (transport/shm.Pipe).
type readWaiter interface {
	Buffered() int
	WaitReadable() (eof bool, err error)
}

type waiterPoll struct {
	c   readWaiter
	eof bool
}

func (w *waiterPoll) inq() (int, error) { return w.c.Buffered(), nil }
func (w *waiterPoll) atEOF() bool       { return w.eof }
func (w *waiterPoll) waitReadable() (err error) {
	w.eof, err = w.c.WaitReadable()
	return err
}

// newPoller returns the poller of c, or nil when c cannot be polled.
func newPoller(c io.ReadWriteCloser) poller {
	if rw, ok := c.(readWaiter); ok {
		return &waiterPoll{c: rw}
	}
	if s := newSockPoll(c); s != nil {
		return s
	}
	return nil
}

// pollFrameMax is the largest frame a polling receiver waits to arrive whole; a larger one that
// has started to arrive is left to the reader goroutine. It counts the header on top of a
// 64 KiB payload: a frame over smallFrame is written as its header and then its payload, so a
// poller often sees the header alone first, and the 64 KiB messages of recursive doubling
// (auto's choice at 64 KiB up to 32 ranks) would otherwise each wake the reader goroutine.
const pollFrameMax = 64<<10 + FrameHeaderSize

// frameArrived reports whether a whole frame is buffered or waiting in the socket, so that
// readFrame will not block, or else whether a frame larger than pollFrameMax is arriving.
// rtok must be held.
func (p *streamPeer) frameArrived() (ready, streaming bool, err error) {
	q, err := p.sock.inq()
	if err != nil {
		return false, false, nil // the reader goroutine reports the connection's state
	}
	avail := p.buffered() + q
	if avail < FrameHeaderSize {
		return false, false, nil
	}
	hdr, err := p.peekHeader()
	if hdr == nil || err != nil {
		return false, false, err
	}
	e := p.ep
	f, err := DecodeFrameHeader(e.rank, p.peer, hdr, e.opts.MaxMessage, e.tab)
	if err != nil {
		return true, false, nil // readFrame reports the bad header
	}
	size := FrameHeaderSize + int(f.WireLen)
	if avail >= size {
		return true, false, nil
	}
	return false, size > pollFrameMax, nil
}

// fail poisons the read side: queued messages stay deliverable, every later Recv gets err.
// failure is the error the peer was failed with, nil while it is alive.
func (p *streamPeer) failure() error {
	if !p.dead.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *streamPeer) fail(err error) {
	e := p.ep
	var fe *FrameError
	if e.isClosed() && !errors.As(err, &fe) {
		err = &PeerError{Rank: e.rank, Peer: p.peer, Op: "recv", Err: errEndpointClosed}
	}
	p.dead.Store(true)
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	var wake []*waiter
	for _, ib := range p.inboxes {
		if ib.w.state == wPosted {
			ib.w.state, ib.w.buf = wIdle, nil
			wake = append(wake, &ib.w)
		}
	}
	p.mu.Unlock()
	for _, w := range wake {
		w.signal()
	}
	if errors.As(err, &fe) {
		// Stop the peer from writing into a stream nobody reads; it sees the link close.
		p.conn.Close()
	}
}

// errClosedByPeer is a stream that ended cleanly: the peer closed it, or its process ended.
// Why is the liveness layer's to say (FailPeer), when it knows.
var errClosedByPeer = errors.New("connection closed by the peer")

func (p *streamPeer) readErr(err error, what string) error {
	e := p.ep
	switch {
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w (%s)", errClosedByPeer, what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("stream truncated in the middle of a frame (%s): %w", what, io.ErrUnexpectedEOF)
	}
	return &PeerError{Rank: e.rank, Peer: p.peer, Op: "recv", Err: err}
}

func (p *streamPeer) readFrame() error {
	e := p.ep
	if err := p.readHeader(); err != nil {
		what := "between frames"
		if errors.Is(err, io.ErrUnexpectedEOF) {
			what = "frame header"
		}
		return p.readErr(err, what)
	}
	f, err := DecodeFrameHeader(e.rank, p.peer, p.rhdr[:], e.opts.MaxMessage, e.tab)
	if err != nil {
		return err
	}
	n := int(f.RawLen)
	sum := f.Flags&FlagChecksum != 0

	p.mu.Lock()
	ib := p.inbox(f.Channel)
	w := &ib.w
	if f.Codec == CodecNone {
		if p.claimable(ib, &f) {
			// Zero copy: the payload goes from the socket into the waiting receiver's buffer.
			w.state = wFilling
			dst := w.buf[:n]
			p.mu.Unlock()
			return p.fillDirect(ib, &f, dst, 0, 0)
		}
		p.mu.Unlock()
		// Nobody waits yet: leave the payload where it lies when the connection lends it.
		if lent, err := p.lendPayload(&f); lent || err != nil {
			return err
		}
		// Else read into a pooled buffer, but look for a receiver between chunks, so that a
		// Recv posted while a large payload streams in gets the rest directly.
		pb := e.pool.get(n)
		off, crc := 0, uint32(0)
		for off < n {
			k, c, err := p.readPayload(pb.b[off:min(off+readChunk, n)], crc, sum)
			off, crc = off+k, c
			if err != nil {
				e.pool.put(pb)
				return p.payloadErr(err)
			}
			if off < n {
				p.mu.Lock()
				if p.claimable(ib, &f) {
					w.state = wFilling
					dst := w.buf[:n]
					p.mu.Unlock()
					copy(dst, pb.b[:off])
					e.pool.put(pb)
					return p.fillDirect(ib, &f, dst, off, crc)
				}
				p.mu.Unlock()
			}
		}
		if err := checkCRC(e.rank, p.peer, &f, crc); sum && err != nil {
			e.pool.put(pb)
			return err
		}
		p.enqueue(ib, &f, pb)
		return nil
	}
	p.mu.Unlock()

	// Encoded payload: read the wire bytes into the reader's own scratch, then decode straight
	// into a waiting receiver's buffer when there is one, else into a pooled buffer.
	wl := int(f.WireLen)
	if cap(p.rwire) < wl {
		p.rwire = make([]byte, wl)
	}
	wire := p.rwire[:wl]
	_, crc, err := p.readPayload(wire, 0, sum)
	if err == nil {
		err = checkCRC(e.rank, p.peer, &f, crc)
	}
	if err != nil {
		return p.payloadErr(err)
	}
	decodeErr := func(derr error) error {
		c := f
		return &FrameError{Rank: e.rank, Peer: p.peer, Header: &c, Reason: "payload does not decode: " + derr.Error()}
	}
	p.mu.Lock()
	if p.claimable(ib, &f) {
		// Decoding is bounded work, so a cancelled receiver simply waits for it.
		w.state = wDecoding
		dst := w.buf[:n]
		p.mu.Unlock()
		derr := p.rcodec.Decode(f.Codec, dst, wire)
		p.mu.Lock()
		if derr != nil {
			w.state = wPosted // fail wakes the receiver
			p.mu.Unlock()
			return decodeErr(derr)
		}
		p.countRecv(&f)
		w.state, w.buf, w.h, w.n = wDone, nil, f.Header, n
		p.mu.Unlock()
		w.signal()
		return nil
	}
	p.mu.Unlock()
	pb := e.pool.get(n)
	if derr := p.rcodec.Decode(f.Codec, pb.b[:n], wire); derr != nil {
		e.pool.put(pb)
		return decodeErr(derr)
	}
	p.enqueue(ib, &f, pb)
	return nil
}

// claimable reports whether the frame f may go straight into the buffer of the receiver
// waiting on ib: it is waiting, nothing is queued before f, f fits and is what it expects.
// p.mu must be held.
func (p *streamPeer) claimable(ib *inbox, f *FrameHeader) bool {
	w := &ib.w
	return w.state == wPosted && ib.empty() && len(w.buf) >= int(f.RawLen) &&
		(w.matchAny || CheckHeader(p.ep.rank, p.peer, w.want, f.Header) == nil)
}

// fillDirect reads the rest of an uncompressed payload into dst, the buffer of the receiver
// waiting on ib, whose first off bytes (with checksum crc so far) are already there. The
// receiver is in state wFilling. If it gives up meanwhile, the message moves to a pooled buffer
// and stays queued for the next Recv.
func (p *streamPeer) fillDirect(ib *inbox, f *FrameHeader, dst []byte, off int, crc uint32) error {
	e := p.ep
	w := &ib.w
	n := len(dst)
	sum := f.Flags&FlagChecksum != 0
	got, crc, err := p.readPayload(dst[off:], crc, sum)
	got += off
	if err == nil && sum {
		err = checkCRC(e.rank, p.peer, f, crc)
	}
	p.mu.Lock()
	aborting := w.state == wAborting
	if aborting && p.rdl != nil {
		p.rdl.SetReadDeadline(time.Time{})
	}
	if err == nil {
		p.countRecv(f)
		w.state, w.buf, w.h, w.n = wDone, nil, f.Header, n
		p.mu.Unlock()
		w.signal()
		return nil
	}
	var ne net.Error
	if !aborting || !errors.As(err, &ne) || !ne.Timeout() {
		// Let fail wake the receiver.
		w.state = wPosted
		p.mu.Unlock()
		return p.payloadErr(err)
	}
	// The receiver gave up; keep the message for the next Recv. Save what is already in its
	// buffer before letting it go, then read the rest.
	pb := e.pool.get(n)
	copy(pb.b, dst[:got])
	w.state, w.buf = wIdle, nil
	p.mu.Unlock()
	w.signal()
	_, crc, err = p.readPayload(pb.b[got:n], crc, sum)
	if err == nil && sum {
		err = checkCRC(e.rank, p.peer, f, crc)
	}
	if err != nil {
		e.pool.put(pb)
		return p.payloadErr(err)
	}
	p.enqueue(ib, f, pb)
	return nil
}

func (p *streamPeer) payloadErr(err error) error {
	var fe *FrameError
	if errors.As(err, &fe) {
		return err
	}
	return p.readErr(err, "payload")
}

func (p *streamPeer) enqueue(ib *inbox, f *FrameHeader, pb *pooledBuf) {
	p.enqueuePending(ib, f, pending{h: f.Header, buf: pb, n: int(f.RawLen)})
}

// enqueuePending queues m, the message of frame f, and wakes the receiver waiting on ib.
func (p *streamPeer) enqueuePending(ib *inbox, f *FrameHeader, m pending) {
	p.countRecv(f)
	p.mu.Lock()
	ib.push(m)
	if m.lent != nil {
		p.queuedLends++
	}
	w := &ib.w
	wake := w.state == wPosted
	if wake {
		w.state, w.buf = wIdle, nil
	}
	p.mu.Unlock()
	if wake {
		w.signal()
	}
}

func (p *streamPeer) countRecv(f *FrameHeader) {
	s := &p.ep.stats
	s.msgsRecv.Add(1)
	s.bytesRecv.Add(uint64(f.RawLen))
	s.wireRecv.Add(uint64(FrameHeaderSize) + uint64(f.WireLen))
}

// readPayload fills dst from the stream, updating crc chunk by chunk. It returns the bytes
// read, also on error. sum=false skips the checksum.
func (p *streamPeer) readPayload(dst []byte, crc uint32, sum bool) (int, uint32, error) {
	tab := p.ep.tab
	if p.lend != nil {
		return p.readLender(dst, crc, sum)
	}
	if !sum {
		n, err := io.ReadFull(p.br, dst)
		return n, crc, err
	}
	off := 0
	for off < len(dst) {
		end := min(off+readChunk, len(dst))
		n, err := io.ReadFull(p.br, dst[off:end])
		crc = crc32.Update(crc, tab, dst[off:off+n])
		off += n
		if err != nil {
			return off, crc, err
		}
	}
	return off, crc, nil
}
