//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	// maxSleep bounds one wait, so that no wait depends on a single wake-up.
	maxSleep = 200 * time.Millisecond
	// chunk is how many bytes a Read or Write copies before publishing its progress, so the
	// other side works on the first part while this side copies the next.
	maxChunk = 256 << 10
)

// Doorbells: the byte one end sends the other over the link to wake its reader (data is
// there) or its writer (room is there).
const (
	bellRead  = 'r'
	bellWrite = 'w'
)

// ring is one direction of the pipe as seen by one end (producer or consumer).
type ring struct {
	data  []byte
	size  uint64
	mask  uint64
	chunk uint64
	pos   uint64 // this end's own index: head for the producer, tail for the consumer

	head, tail       *atomic.Uint64
	rwait, wwait     *atomic.Uint32
	wclosed, rclosed *atomic.Uint32

	// The single-copy write of this direction (see SingleCopy in the package documentation).
	remote *atomic.Uint64    // state: generation, status, bytes taken
	desc   [3]*atomic.Uint64 // address, length, stream position of the posted buffer
	reads  *atomic.Uint32    // the consumer can read the producer's memory
}

func newRing(mem []byte, i, size int) ring {
	ctl := ctlOff + i*ctlSize
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[ctl+off])) }
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[ctl+off])) }
	start := dataOff + i*size
	r := ring{
		data: mem[start : start+size : start+size], size: uint64(size), mask: uint64(size - 1),
		chunk: uint64(min(size/4, maxChunk)),
		head:  u64(offHead), tail: u64(offTail),
		rwait: u32(offRWait), wwait: u32(offWWait),
		wclosed: u32(offWClosed), rclosed: u32(offRClosed),
		remote: u64(offRemote), desc: [3]*atomic.Uint64{u64(offDesc), u64(offDesc + 8), u64(offDesc + 16)},
		reads: u32(offReads),
	}
	return r
}

// Pipe is one end of a shared-memory byte pipe: an io.ReadWriteCloser with deadlines. One
// Read and one Write may run at the same time (concurrent Reads, or Writes, are serialized).
type Pipe struct {
	peer         string
	spin, yields int
	mem          []byte
	link         io.ReadWriteCloser
	in, out      ring // in: this end consumes; out: this end produces
	rmu, wmu     sync.Mutex
	rbell, wbell chan struct{} // wake this end's reader, writer (capacity 1)
	rtimer       *time.Timer   // bounds the reader's waits; only the reader uses it
	wtimer       *time.Timer
	ringR, ringW [1]byte      // doorbell bytes, kept here so that ringing allocates nothing
	rdl, wdl     atomic.Int64 // deadlines in Unix nanoseconds, 0 for none
	closed       atomic.Bool
	writeShut    atomic.Bool
	gone         atomic.Pointer[error]
	ops          sync.RWMutex // shared by calls that touch the mapping; Close takes it to unmap
	watchDone    chan struct{}
	closeOnce    sync.Once
	closeErr     error
	release      func() // drops the segment's lock when its file was never unlinked

	// rawLink is link's file descriptor when it has one: doorbells are written to it with a
	// raw system call (see doorbell). ringRFn and ringWFn are bound once so that ringing
	// allocates nothing.
	rawLink          syscall.RawConn
	ringRFn, ringWFn func(fd uintptr) bool

	// Single copy (see SingleCopy).
	singleCopyMin int
	singleCopyMax int             // 0: no bound
	readsPeer     bool            // this end reads the peer's buffers (decided by probePeer)
	refusal       error           // why not, when it does not
	peerMem       peerMem         // reader only, after probePeer
	wgen          uint64          // writer only: generation of the last single-copy write
	probe         *[probeLen]byte // this process's nonce, kept in place for the peer's probe

	// Lending (see Lend): mirror is the incoming ring's data mapped twice, back to back; nil
	// when it could not be mapped, and then nothing is lent.
	mirror []byte
	lends  lendState
}

// Pipe turns the segment into this side's end of the pipe. link is a connection to the same
// peer (a Unix socket), kept open for the pipe's lifetime: it carries the doorbells that wake
// a sleeping reader or writer, and it is the liveness signal: when it ends (the peer process
// exited, or crashed, and the kernel closed its end), the pipe fails every blocked and later
// call with an error wrapping ErrPeerGone. The pipe owns link and closes it. Nothing else may
// read or write link.
func (s *Segment) Pipe(link io.ReadWriteCloser) (*Pipe, error) {
	if link == nil {
		return nil, fmt.Errorf("shm pipe to %s: no liveness link", s.opts.Peer)
	}
	s.mu.Lock()
	if s.handed {
		s.mu.Unlock()
		return nil, fmt.Errorf("shm pipe to %s: the segment %s is closed or already a pipe", s.opts.Peer, s.path)
	}
	s.handed = true
	s.mu.Unlock()
	p := &Pipe{peer: s.opts.Peer, spin: s.opts.Spin, yields: s.opts.Yields, mem: s.mem, link: link,
		rbell: make(chan struct{}, 1), wbell: make(chan struct{}, 1),
		rtimer: time.NewTimer(time.Hour), wtimer: time.NewTimer(time.Hour),
		ringR: [1]byte{bellRead}, ringW: [1]byte{bellWrite}, watchDone: make(chan struct{}), release: s.release,
		singleCopyMin: s.opts.SingleCopyMin, singleCopyMax: s.opts.SingleCopyMax, probe: s.probe, mirror: s.mirror}
	p.rtimer.Stop()
	p.wtimer.Stop()
	if sc, ok := link.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			p.rawLink = raw
			p.ringRFn = func(fd uintptr) bool { return writeBell(fd, &p.ringR) }
			p.ringWFn = func(fd uintptr) bool { return writeBell(fd, &p.ringW) }
		}
	}
	r0, r1 := newRing(s.mem, 0, s.ringSize), newRing(s.mem, 1, s.ringSize)
	if s.creator {
		p.out, p.in = r0, r1
	} else {
		p.out, p.in = r1, r0
	}
	p.out.pos = p.out.head.Load()
	p.in.pos = p.in.tail.Load()
	p.lends.taken.Store(p.in.pos)
	p.probePeer(s, link)
	go p.watch(link)
	return p, nil
}

// watch reads the link: doorbells wake this end's reader or writer; the end of the link,
// while the pipe is open, means the peer is gone.
func (p *Pipe) watch(link io.Reader) {
	defer close(p.watchDone)
	var b [64]byte
	read := link.Read
	if p.rawLink != nil {
		read = rawReader(p.rawLink)
	}
	var err error
	for err == nil {
		var n int
		n, err = read(b[:])
		for _, c := range b[:n] {
			switch c {
			case bellRead:
				signal(p.rbell)
			case bellWrite:
				signal(p.wbell)
			default:
				if err == nil {
					err = fmt.Errorf("unexpected byte %#x on the doorbell link", c)
				}
			}
		}
	}
	if p.closed.Load() {
		return
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("its end of the doorbell link closed")
	}
	gone := fmt.Errorf("shm pipe to %s: %w without closing the pipe (%v)", p.peer, ErrPeerGone, err)
	p.gone.Store(&gone)
	p.wakeSelf()
}

// rawReader reads a non-blocking socket with raw system calls, parking in Go's network poller
// while it has nothing to read. The doorbell watcher reads once per doorbell; the link's own
// Read would tell Go's scheduler each time that the thread may block, which wakes the
// runtime's monitor thread from its sleep in a rank that was idle, and keeps it polling at its
// shortest period for a while after, on every rank of a host whose ranks outnumber its cores.
func rawReader(raw syscall.RawConn) func([]byte) (int, error) {
	var (
		buf   []byte
		n     int
		errno syscall.Errno
	)
	fn := func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			return true
		}
	}
	return func(b []byte) (int, error) {
		if len(b) == 0 {
			return 0, nil
		}
		buf = b
		if err := raw.Read(fn); err != nil {
			return 0, err
		}
		switch {
		case errno != 0:
			return 0, os.NewSyscallError("read", errno)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (p *Pipe) goneErr() error {
	if e := p.gone.Load(); e != nil {
		return *e
	}
	return nil
}

// doorbell asks the peer to wake its reader (bellRead) or writer (bellWrite), when its flag says
// that it sleeps or is about to. A failed write means the link is gone, which the watcher
// reports.
//
// A one-byte write to a non-blocking socket never blocks, so it is a raw system call when the
// link has a file descriptor: through the link's Write it would tell Go's scheduler that the
// thread may block, waking the runtime's monitor thread on entry and exit, once per message
// when the peer's reader sleeps between messages, as it does (WaitReadable) while a receiver
// polls.
func (p *Pipe) doorbell(flag *atomic.Uint32, bell *[1]byte) {
	if flag.Load() == 0 || !flag.CompareAndSwap(1, 0) {
		return
	}
	if p.rawLink == nil {
		p.link.Write(bell[:])
		return
	}
	fn := p.ringWFn
	if bell == &p.ringR {
		fn = p.ringRFn
	}
	p.rawLink.Write(fn)
}

// writeBell writes the doorbell byte b to fd; it reports false (wait until writable, then try
// again) only when the socket's buffer is full. Other errors mean the link is gone, which the
// watcher reports.
func writeBell(fd uintptr, b *[1]byte) bool {
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), 1)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}

// wakeSelf wakes this end's own reader and writer so that they look at their state again.
func (p *Pipe) wakeSelf() {
	signal(p.rbell)
	signal(p.wbell)
}

// sleep waits for bell, or at most maxSleep, or until the deadline dl (Unix nanoseconds, 0
// for none).
func sleep(bell chan struct{}, t *time.Timer, dl int64) {
	d := maxSleep
	if dl != 0 {
		d = min(d, time.Duration(dl-time.Now().UnixNano()))
		if d <= 0 {
			return
		}
	}
	t.Reset(d)
	select {
	case <-bell:
	case <-t.C:
	}
	t.Stop()
}

// idle is the n-th look (from 1) that found nothing to do. It spins, then lets this
// process's other goroutines run, then yields the CPU to other processes, and reports false
// when it is time to sleep.
func (p *Pipe) idle(n int) bool {
	switch {
	case n <= p.spin:
	case n == p.spin+1:
		runtime.Gosched()
	case n <= p.spin+1+p.yields:
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	default:
		return false
	}
	return true
}

func expired(dl int64) bool { return dl != 0 && time.Now().UnixNano() >= dl }

func (p *Pipe) closedErr(op string) error {
	return &net.OpError{Op: op, Net: "shm", Err: fmt.Errorf("pipe to %s: %w", p.peer, net.ErrClosed)}
}

func (p *Pipe) corrupt(what string, a, b uint64) error {
	return fmt.Errorf("shm pipe to %s: corrupt ring: %s (%d, %d)", p.peer, what, a, b)
}

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

// SetReadDeadline sets the time after which a blocked or later Read fails with
// os.ErrDeadlineExceeded; a time in the past interrupts a blocked Read. The zero time
// clears it.
func (p *Pipe) SetReadDeadline(t time.Time) error {
	return p.setDeadline(&p.rdl, t, true, false)
}

// SetWriteDeadline does the same for Write.
func (p *Pipe) SetWriteDeadline(t time.Time) error {
	return p.setDeadline(&p.wdl, t, false, true)
}

// SetDeadline sets both deadlines.
func (p *Pipe) SetDeadline(t time.Time) error {
	if err := p.setDeadline(&p.rdl, t, true, false); err != nil {
		return err
	}
	return p.setDeadline(&p.wdl, t, false, true)
}

func (p *Pipe) setDeadline(dl *atomic.Int64, t time.Time, read, write bool) error {
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.closed.Load() {
		return p.closedErr("set deadline")
	}
	var v int64
	if !t.IsZero() {
		v = t.UnixNano()
		if v <= 0 {
			v = 1
		}
	}
	dl.Store(v)
	// A sleeper computed its timeout from the old deadline: make it look again.
	if read {
		signal(p.rbell)
	}
	if write {
		signal(p.wbell)
	}
	return nil
}

// CloseWrite ends the outgoing direction: the peer reads what is in the ring, then io.EOF.
// Later Writes fail. Reading goes on.
func (p *Pipe) CloseWrite() error {
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.closed.Load() {
		return p.closedErr("close write")
	}
	p.writeShut.Store(true)
	p.out.wclosed.Store(1)
	p.link.Write(p.ringR[:]) // the peer's reader may sleep: it must see the end
	signal(p.wbell)
	return nil
}

// Close closes both directions, tells the peer (its reads end with io.EOF after the data
// already written, its writes fail), fails this end's blocked calls with net.ErrClosed,
// closes the link and unmaps the segment once no call touches it any more.
func (p *Pipe) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.out.wclosed.Store(1)
		p.in.rclosed.Store(1)
		// The peer's sleepers wake when the link closes (its watcher sees the end).
		p.wakeSelf()
		if err := p.link.Close(); err != nil {
			p.closeErr = fmt.Errorf("shm pipe to %s: closing the liveness link: %w", p.peer, err)
		}
		<-p.watchDone
		p.ops.Lock()
		mem, mirror := p.mem, p.mirror
		unmap := func() error {
			err := syscall.Munmap(mem)
			if mirror != nil {
				if merr := syscall.Munmap(mirror); err == nil {
					err = merr
				}
			}
			return err
		}
		// Bytes still lent stay mapped: the last Return unmaps.
		p.lends.mu.Lock()
		p.lends.closed = true
		if p.lends.n > 0 {
			p.lends.unmap = func() { unmap() }
		} else if err := unmap(); err != nil && p.closeErr == nil {
			p.closeErr = fmt.Errorf("shm pipe to %s: unmapping the segment: %w", p.peer, err)
		}
		p.lends.mu.Unlock()
		p.mem = nil
		p.peerMem.close()
		p.ops.Unlock()
		p.release()
	})
	return p.closeErr
}

// Buffered returns how many bytes the peer has written that no Read has taken yet: one atomic
// load of each index, no system call, so a receiver may poll it. 0 after Close.
func (p *Pipe) Buffered() int {
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.closed.Load() {
		return 0
	}
	n := p.in.head.Load() - p.lends.taken.Load()
	if n > p.in.size {
		return 0 // corrupt; Read reports it
	}
	return int(n + p.in.remotePending())
}

// Peer is the name of the other side, as given in Options.Peer.
func (p *Pipe) Peer() string { return p.peer }

// RingSize is the capacity of each direction of the pipe, as its segment's creator chose it.
func (p *Pipe) RingSize() int { return int(p.out.size) }
