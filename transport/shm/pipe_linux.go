//go:build linux

package shm

import (
	"fmt"
	"io"
	"net"
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

func (p *Pipe) goneErr() error {
	if e := p.gone.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *Pipe) closedErr(op string) error {
	return &net.OpError{Op: op, Net: "shm", Err: fmt.Errorf("pipe to %s: %w", p.peer, net.ErrClosed)}
}

func (p *Pipe) corrupt(what string, a, b uint64) error {
	return fmt.Errorf("shm pipe to %s: corrupt ring: %s (%d, %d)", p.peer, what, a, b)
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
