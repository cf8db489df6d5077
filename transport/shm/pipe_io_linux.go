//go:build linux

package shm

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Reading and writing a pipe: copying between the caller's buffer and the ring, chunk by
// chunk, and waiting while the ring is empty or full.

// Read copies what the peer has written, up to len(b) bytes, straight from the ring into b.
// It blocks until at least one byte is there, the peer closed its direction (io.EOF once
// drained), the peer is gone, the pipe is closed or the read deadline passes.
func (p *Pipe) Read(b []byte) (int, error) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.closed.Load() {
		return 0, p.closedErr("read")
	}
	if len(b) == 0 {
		return 0, nil
	}
	r := &p.in
	idle := 0
	for {
		dl := p.rdl.Load()
		if expired(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		if h := r.head.Load(); h != r.pos {
			return p.copyOut(b)
		}
		if n, ok, err := p.readRemote(b); ok {
			return n, err
		}
		if p.closed.Load() {
			return 0, p.closedErr("read")
		}
		// The producer publishes head before its closed flag, and the watcher learns that the
		// peer is gone after everything it wrote: look at head again after either.
		if r.wclosed.Load() != 0 {
			if r.head.Load() != r.pos || r.remotePending() != 0 {
				continue
			}
			return 0, io.EOF
		}
		if err := p.goneErr(); err != nil {
			if r.head.Load() != r.pos || r.remotePending() != 0 {
				continue
			}
			return 0, err
		}
		idle++
		if p.idle(idle) {
			continue
		}
		r.rwait.Store(1)
		if r.head.Load() == r.pos && r.remotePending() == 0 && r.wclosed.Load() == 0 && !p.closed.Load() && p.gone.Load() == nil && p.rdl.Load() == dl {
			sleep(p.rbell, p.rtimer, dl)
		}
		r.rwait.CompareAndSwap(1, 0)
		idle = 0
	}
}

// WaitReadable blocks until the peer has written bytes that no Read has taken, without taking
// any, and reports eof when instead the peer closed its direction with nothing left to read. It
// fails as Read would (peer gone, pipe closed, read deadline). It does not hold the read side,
// so that another goroutine may Read meanwhile (a receiver polling with Buffered while the
// connection's reader waits here); only one goroutine may wait in Read or WaitReadable at a
// time. Unlike Read it neither spins nor yields before it sleeps: its caller is the backstop
// of a receiver that polls, and a rank keeps one such waiter per peer, so spinning here would
// spend the shared cores of a host on every idle peer of every rank instead of on the ranks
// that have work.
func (p *Pipe) WaitReadable() (eof bool, err error) {
	p.ops.RLock()
	defer p.ops.RUnlock()
	r := &p.in
	for {
		if p.closed.Load() {
			return false, p.closedErr("read")
		}
		dl := p.rdl.Load()
		if expired(dl) {
			return false, os.ErrDeadlineExceeded
		}
		if r.head.Load() != p.lends.taken.Load() || r.remotePending() != 0 {
			return false, nil
		}
		if r.wclosed.Load() != 0 {
			if r.head.Load() != p.lends.taken.Load() || r.remotePending() != 0 {
				continue
			}
			return true, nil
		}
		if err := p.goneErr(); err != nil {
			if r.head.Load() != p.lends.taken.Load() || r.remotePending() != 0 {
				continue
			}
			return false, err
		}
		r.rwait.Store(1)
		if r.head.Load() == p.lends.taken.Load() && r.remotePending() == 0 && r.wclosed.Load() == 0 && !p.closed.Load() && p.gone.Load() == nil && p.rdl.Load() == dl {
			sleep(p.rbell, p.rtimer, dl)
		}
		r.rwait.CompareAndSwap(1, 0)
	}
}

// copyOut copies from the ring into b while there is data and room, publishing tail chunk by
// chunk. There is at least one byte to read.
func (p *Pipe) copyOut(b []byte) (int, error) {
	r := &p.in
	n := 0
	for n < len(b) {
		avail := r.head.Load() - r.pos
		if avail == 0 {
			break
		}
		if avail > r.size {
			return n, p.corrupt("head ahead of tail by more than the ring", r.pos+avail, r.pos)
		}
		k := min(avail, uint64(len(b)-n), r.chunk)
		off := r.pos & r.mask
		first := min(k, r.size-off)
		copy(b[n:n+int(first)], r.data[off:off+first])
		if k > first {
			copy(b[n+int(first):n+int(k)], r.data[:k-first])
		}
		r.pos += k
		n += int(k)
		p.publishTail(r.pos)
		p.doorbell(r.wwait, &p.ringW)
	}
	return n, nil
}

// Write copies b into the ring, chunk by chunk, blocking while the ring is full. It returns
// when all of b is in the ring (not necessarily read), or with the count written so far when
// the peer closed its end or is gone, the pipe is closed or the write deadline passes.
func (p *Pipe) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.ops.RLock()
	defer p.ops.RUnlock()
	r := &p.out
	n := 0
	idle := 0
	for n < len(b) {
		if p.closed.Load() {
			return n, p.closedErr("write")
		}
		if p.writeShut.Load() {
			return n, &net.OpError{Op: "write", Net: "shm", Err: fmt.Errorf("pipe to %s: write side closed: %w", p.peer, net.ErrClosed)}
		}
		dl := p.wdl.Load()
		if expired(dl) {
			return n, os.ErrDeadlineExceeded
		}
		if r.rclosed.Load() != 0 {
			return n, fmt.Errorf("shm pipe to %s: the peer closed its end: %w", p.peer, syscall.EPIPE)
		}
		if err := p.goneErr(); err != nil {
			return n, err
		}
		if rest := len(b) - n; p.offersTo(rest) {
			k, err := p.writeRemote(b[n : n+min(rest, maxRemote)])
			n += k
			if err != nil {
				return n, err
			}
			continue
		}
		t := r.tail.Load()
		used := r.pos - t
		if used > r.size {
			return n, p.corrupt("tail behind head by more than the ring", r.pos, t)
		}
		if free := r.size - used; free > 0 {
			k := min(free, uint64(len(b)-n), r.chunk)
			off := r.pos & r.mask
			first := min(k, r.size-off)
			copy(r.data[off:off+first], b[n:n+int(first)])
			if k > first {
				copy(r.data[:k-first], b[n+int(first):n+int(k)])
			}
			r.pos += k
			n += int(k)
			r.head.Store(r.pos)
			p.doorbell(r.rwait, &p.ringR)
			idle = 0
			continue
		}
		idle++
		if p.idle(idle) {
			continue
		}
		r.wwait.Store(1)
		if r.tail.Load() == t && r.rclosed.Load() == 0 && !p.closed.Load() && p.gone.Load() == nil && p.wdl.Load() == dl {
			sleep(p.wbell, p.wtimer, dl)
		}
		r.wwait.CompareAndSwap(1, 0)
		idle = 0
	}
	return n, nil
}
