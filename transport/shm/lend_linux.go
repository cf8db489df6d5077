//go:build linux

package shm

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// maxLends bounds how many lends a pipe holds at once; a Lend beyond it takes nothing and the
// caller copies.
const maxLends = 16

type lendRec struct {
	start, end uint64 // stream positions
	returned   bool
}

// lendState is the consumer's record of the bytes it lent (see Lend). The ring's tail, which
// tells the producer how far it may write, stays at the start of the oldest lend still held:
// the producer never overwrites a lent byte.
type lendState struct {
	taken atomic.Uint64 // the reader's position: bytes read or lent, for Buffered and WaitReadable

	mu       sync.Mutex
	recs     [maxLends]lendRec // in stream order, from first, n of them
	first, n int
	// closed: the pipe is closed; the tail is no longer published and the last Return unmaps
	// the segment (Close leaves the mapping in place while a lend is held).
	closed bool
	unmap  func()
}

// mapMirror maps the size bytes of the segment file at offset off twice, back to back and
// read-only, so that bytes that wrap the ring's end read as one slice. It fails where the
// offset is not a multiple of the page size. The mapping is not populated: its pages fault in
// when something is lent, so a pipe whose reader never lends pays only for address space.
func mapMirror(fd int, off int64, size int) ([]byte, error) {
	area, err := syscall.Mmap(-1, 0, 2*size, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, err
	}
	base := uintptr(unsafe.Pointer(&area[0]))
	for i := range 2 {
		_, _, e := syscall.Syscall6(syscall.SYS_MMAP, base+uintptr(i*size), uintptr(size), syscall.PROT_READ,
			syscall.MAP_SHARED|syscall.MAP_FIXED, uintptr(fd), uintptr(off))
		if e != 0 {
			syscall.Munmap(area)
			return nil, e
		}
	}
	return area, nil
}

// LendMax is the largest Lend this pipe grants: half its ring, so that the producer always
// has the other half for what follows; 0 when it lends nothing (no mirrored mapping, or this
// end reads the peer's single copies, whose bytes are never in the ring).
func (p *Pipe) LendMax() int {
	if p.mirror == nil || p.readsPeer {
		return 0
	}
	return int(p.in.size / 2)
}

// Held returns how many bytes the reader has taken that the producer may not overwrite yet:
// from the start of the oldest lend still held to the reader's position. 0 when none is held.
func (p *Pipe) Held() int {
	l := &p.lends
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return 0
	}
	return int(l.taken.Load() - l.recs[l.first].start)
}

// Lend takes the next n bytes of the stream, waiting until all of them are in the ring, and
// returns them in place: one read-only slice of the shared mapping (a range that wraps the
// ring's end is contiguous in its mirrored mapping). The slice has the stream position's
// alignment: a caller that views it as words must accept unaligned ones. The producer does
// not overwrite them until Return gives them back, and the mapping outlives Close until then.
// Lend returns nil and takes nothing when it may not lend: n is 0 or above LendMax, the bytes
// held by earlier lends and n together would exceed LendMax, or too many lends are held. It fails as Read would, with io.ErrUnexpectedEOF when the
// peer closed its direction before n bytes arrived.
//
// A caller that holds lent bytes and waits for more bytes of the same pipe can deadlock once
// the producer has filled the rest of the ring: give them back, or copy them, first.
func (p *Pipe) Lend(n int) ([]byte, error) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.closed.Load() {
		return nil, p.closedErr("read")
	}
	r := &p.in
	if !p.mayLend(n) {
		return nil, nil
	}
	want := uint64(n)
	idle := 0
	for {
		dl := p.rdl.Load()
		if expired(dl) {
			return nil, os.ErrDeadlineExceeded
		}
		avail := r.head.Load() - r.pos
		if avail > r.size {
			return nil, p.corrupt("head ahead of tail by more than the ring", r.pos+avail, r.pos)
		}
		if avail >= want {
			break
		}
		if p.closed.Load() {
			return nil, p.closedErr("read")
		}
		// As in Read: the producer publishes head before its closed flag, and the watcher
		// learns that the peer is gone after everything it wrote.
		if r.wclosed.Load() != 0 || p.gone.Load() != nil {
			if r.head.Load()-r.pos >= want {
				continue
			}
			if r.wclosed.Load() != 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, p.goneErr()
		}
		idle++
		if p.idle(idle) {
			continue
		}
		r.rwait.Store(1)
		if r.head.Load()-r.pos < want && r.wclosed.Load() == 0 && !p.closed.Load() && p.gone.Load() == nil && p.rdl.Load() == dl {
			sleep(p.rbell, p.rtimer, dl)
		}
		r.rwait.CompareAndSwap(1, 0)
		idle = 0
	}
	off := r.pos & r.mask
	b := p.mirror[off : off+want : off+want]
	l := &p.lends
	l.mu.Lock()
	l.recs[(l.first+l.n)%maxLends] = lendRec{start: r.pos, end: r.pos + want}
	l.n++
	r.pos += want
	l.taken.Store(r.pos)
	l.mu.Unlock()
	return b, nil
}

// mayLend reports whether a lend of n bytes at the reader's position is allowed (see Lend).
// rmu must be held.
func (p *Pipe) mayLend(n int) bool {
	lim := p.LendMax()
	if n <= 0 || n > lim {
		return false
	}
	l := &p.lends
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == maxLends {
		return false
	}
	held := uint64(0)
	if l.n > 0 {
		held = p.in.pos - l.recs[l.first].start
	}
	return held+uint64(n) <= uint64(lim)
}

// Return gives back bytes that Lend lent. Once every lend before them in the stream is back
// too, the producer may write over them. Giving back anything else does nothing.
func (p *Pipe) Return(b []byte) {
	if len(b) == 0 || p.mirror == nil {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(p.mirror)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if at < base || at >= base+uintptr(p.in.size) {
		return
	}
	off := uint64(at - base)
	l := &p.lends
	l.mu.Lock()
	defer l.mu.Unlock()
	found := false
	for i := range l.n {
		rec := &l.recs[(l.first+i)%maxLends]
		if !rec.returned && rec.start&p.in.mask == off && rec.end-rec.start == uint64(len(b)) {
			rec.returned, found = true, true
			break
		}
	}
	if !found {
		return
	}
	for l.n > 0 && l.recs[l.first].returned {
		l.first = (l.first + 1) % maxLends
		l.n--
	}
	if l.closed {
		if l.n == 0 && l.unmap != nil {
			l.unmap()
			l.unmap = nil
		}
		return
	}
	tail := l.taken.Load()
	if l.n > 0 {
		tail = l.recs[l.first].start
	}
	r := &p.in
	if tail != r.tail.Load() {
		r.tail.Store(tail)
		p.doorbell(r.wwait, &p.ringW)
	}
}

// publishTail tells the producer that the reader has taken everything before pos, unless a
// lend before pos is still held. Only the reader calls it, with rmu held.
func (p *Pipe) publishTail(pos uint64) {
	l := &p.lends
	l.mu.Lock()
	l.taken.Store(pos)
	if l.n == 0 {
		p.in.tail.Store(pos)
	}
	l.mu.Unlock()
}

// PeekInto copies the next len(b) bytes of the stream into b without taking them, when all of
// them are in the ring and no other call reads the pipe; it reports whether it did.
func (p *Pipe) PeekInto(b []byte) bool {
	if !p.rmu.TryLock() {
		return false
	}
	defer p.rmu.Unlock()
	p.ops.RLock()
	defer p.ops.RUnlock()
	r := &p.in
	if p.closed.Load() || uint64(len(b)) > r.size {
		return false
	}
	if avail := r.head.Load() - r.pos; avail > r.size || avail < uint64(len(b)) {
		return false
	}
	off := r.pos & r.mask
	first := min(uint64(len(b)), r.size-off)
	copy(b[:first], r.data[off:off+first])
	copy(b[first:], r.data[:uint64(len(b))-first])
	return true
}
