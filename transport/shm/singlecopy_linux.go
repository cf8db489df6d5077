//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The state word of a single-copy write (offRemote): generation, status and how many bytes
// the reader has taken, in one word, so that the reader's progress and the writer's
// withdrawal are decided by one compare-and-swap and never both happen.
const (
	stPosted  = 1 // the writer waits; the reader may copy
	stDone    = 2 // the reader took every byte; the writer may return
	stRevoked = 3 // the writer gave up (deadline, close, peer gone) before the reader was done

	progressBits = 42
	progressMask = 1<<progressBits - 1
	genMask      = 1<<20 - 1
	// maxRemote is the largest buffer one single-copy write hands over; Write splits larger ones.
	maxRemote = 1 << 40
)

func remoteState(gen, status, progress uint64) uint64 {
	return gen<<(progressBits+2) | status<<progressBits | progress
}

func stateGen(st uint64) uint64      { return st >> (progressBits + 2) }
func stateStatus(st uint64) uint64   { return st >> progressBits & 3 }
func stateProgress(st uint64) uint64 { return st & progressMask }

// writeProcBlock fills this side's process block: its pid and the address and bytes of a
// fresh random nonce, which the peer reads with process_vm_readv to prove that it may.
func writeProcBlock(mem []byte, side int) (*[probeLen]byte, error) {
	probe := new([probeLen]byte)
	if _, err := rand.Read(probe[:]); err != nil {
		return nil, fmt.Errorf("drawing the single-copy probe: %w", err)
	}
	b := mem[procOff+side*procSize : procOff+(side+1)*procSize]
	binary.LittleEndian.PutUint32(b[offPID:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint64(b[offProbe:], uint64(uintptr(unsafe.Pointer(probe))))
	copy(b[offNonce:offNonce+probeLen], probe[:])
	return probe, nil
}

// peerMem reads the peer process's memory: its pid, a pidfd that tells whether it is still
// the same live process, and the vectors of the system call, kept here so that a read
// allocates nothing.
type peerMem struct {
	pid   int
	pidfd int // -1 when the kernel has no pidfd_open
	liov  [1]unix.Iovec
	riov  [1]unix.RemoteIovec
	pfd   [1]unix.PollFd
}

// read copies len(dst) bytes (or fewer, when the peer's mapping ends) from the peer's address
// addr into dst. A peer that exited, or whose pid now names another process, is an error
// wrapping ErrPeerGone: the bytes may come from a process that is not the writer.
func (m *peerMem) read(dst []byte, addr uint64) (int, error) {
	m.liov[0].Base = &dst[0]
	m.liov[0].SetLen(len(dst))
	m.riov[0].Base = uintptr(addr)
	m.riov[0].Len = len(dst)
	n, err := unix.ProcessVMReadv(m.pid, m.liov[:], m.riov[:], 0)
	m.liov[0].Base = nil
	if errors.Is(err, unix.ESRCH) {
		return 0, fmt.Errorf("%w (process %d no longer exists)", ErrPeerGone, m.pid)
	}
	if err != nil {
		return 0, fmt.Errorf("reading %d bytes at %#x of process %d: %w", len(dst), addr, m.pid, err)
	}
	if m.pidfd >= 0 {
		m.pfd[0] = unix.PollFd{Fd: int32(m.pidfd), Events: unix.POLLIN}
		if k, _ := unix.Poll(m.pfd[:], 0); k > 0 {
			return 0, fmt.Errorf("%w (process %d exited during the copy)", ErrPeerGone, m.pid)
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("reading %d bytes at %#x of process %d: %w", len(dst), addr, m.pid, io.ErrUnexpectedEOF)
	}
	return n, nil
}

func (m *peerMem) close() {
	if m.pidfd >= 0 {
		unix.Close(m.pidfd)
		m.pidfd = -1
	}
}

// peerCredPID is the pid the kernel recorded for the other end of link when it is a connected
// Unix socket (SO_PEERCRED), 0 otherwise. It is the right pid across pid namespaces, but for a
// socket pair it names the process that made the pair, not the one holding the other end.
func peerCredPID(link io.ReadWriteCloser) int {
	sc, ok := link.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// probePeer decides, once, whether this end reads the peer's buffers itself: it reads the
// nonce of the peer's process block out of the peer's memory, trying the pid the peer wrote
// and the one the kernel gives for the link. A refusal (another user, Yama's ptrace_scope, a
// container's seccomp filter) leaves the ring as the only path from the peer; the reason is
// kept for SingleCopy. On success this end says so in the peer's producer ring, so that the
// peer starts offering its large writes.
func (p *Pipe) probePeer(s *Segment, link io.ReadWriteCloser) {
	p.peerMem.pidfd = -1
	if s.opts.SingleCopyMin < 0 {
		p.refusal = errors.New("turned off (SingleCopyMin < 0)")
		return
	}
	side := 1
	if !s.creator {
		side = 0
	}
	blk := s.mem[procOff+side*procSize : procOff+(side+1)*procSize]
	addr := binary.LittleEndian.Uint64(blk[offProbe:])
	nonce := blk[offNonce : offNonce+probeLen]
	pids := []int{int(binary.LittleEndian.Uint32(blk[offPID:]))}
	if pid := peerCredPID(link); pid > 0 && pid != pids[0] {
		pids = append(pids, pid)
	}
	var got [probeLen]byte
	var errs []error
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		m := peerMem{pid: pid, pidfd: -1}
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			m.pidfd = fd
		}
		n, err := m.read(got[:], addr)
		if err == nil && n == probeLen && string(got[:]) == string(nonce) {
			p.peerMem = m
			p.readsPeer = true
			p.in.reads.Store(1)
			return
		}
		m.close()
		if err == nil {
			err = fmt.Errorf("process %d holds other bytes at the probe's address", pid)
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("the peer wrote no pid"))
	}
	p.refusal = fmt.Errorf("cannot read the memory of %s: %w", p.peer, errors.Join(errs...))
}

// SingleCopy reports which directions of the pipe move large writes with one copy: in, this
// end reads the peer's buffers straight into its own; out, the peer reads this end's. refused
// says why not in (nil when in is true). Each end decides its in direction when the pipe is
// made; the peer's verdict on out may arrive a moment after this end's pipe is made.
func (p *Pipe) SingleCopy() (in, out bool, refused error) {
	p.ops.RLock()
	defer p.ops.RUnlock()
	if p.mem == nil {
		return false, false, p.refusal
	}
	return p.readsPeer, p.singleCopyMin > 0 && p.out.reads.Load() == 1, p.refusal
}

// offersTo reports whether a write of n bytes goes to the peer as a single copy.
func (p *Pipe) offersTo(n int) bool {
	return p.singleCopyMin > 0 && n >= p.singleCopyMin && (p.singleCopyMax == 0 || n <= p.singleCopyMax) &&
		p.out.reads.Load() == 1
}

// writeRemote hands b to the reader: it posts b's address, length and stream position and
// waits until the reader has copied every byte, or until it must give up (closed, deadline,
// reader closed or gone), withdrawing the offer in the same compare-and-swap that reads the
// reader's progress, so that the count it returns is exactly what the reader took. wmu and
// ops (read) must be held.
func (p *Pipe) writeRemote(b []byte) (int, error) {
	defer runtime.KeepAlive(b) // the peer reads b's memory until the state says it is done
	r := &p.out
	p.wgen = (p.wgen + 1) & genMask
	gen := p.wgen
	r.desc[0].Store(uint64(uintptr(unsafe.Pointer(&b[0]))))
	r.desc[1].Store(uint64(len(b)))
	r.desc[2].Store(r.pos)
	r.remote.Store(remoteState(gen, stPosted, 0))
	p.doorbell(r.rwait, &p.ringR)
	idle := 0
	for {
		st := r.remote.Load()
		if stateGen(st) != gen {
			return 0, p.corrupt("single-copy generation changed under the writer", stateGen(st), gen)
		}
		switch stateStatus(st) {
		case stDone:
			return len(b), nil
		case stPosted:
		default:
			return 0, p.corrupt("single-copy state not posted while the writer waits", stateStatus(st), stPosted)
		}
		dl := p.wdl.Load()
		var stop error
		switch {
		case p.closed.Load():
			stop = p.closedErr("write")
		case expired(dl):
			stop = os.ErrDeadlineExceeded
		case r.rclosed.Load() != 0:
			stop = fmt.Errorf("shm pipe to %s: the peer closed its end: %w", p.peer, syscall.EPIPE)
		default:
			stop = p.goneErr()
		}
		if stop != nil {
			if r.remote.CompareAndSwap(st, remoteState(gen, stRevoked, stateProgress(st))) {
				return int(stateProgress(st)), stop
			}
			continue // the reader moved on meanwhile: look at what it took
		}
		idle++
		if p.idle(idle) {
			continue
		}
		r.wwait.Store(1)
		if r.remote.Load() == st && r.rclosed.Load() == 0 && !p.closed.Load() && p.gone.Load() == nil && p.wdl.Load() == dl {
			sleep(p.wbell, p.wtimer, dl)
		}
		r.wwait.CompareAndSwap(1, 0)
		idle = 0
	}
}

// remotePending returns how many bytes of a posted single-copy write the reader has not taken.
func (r *ring) remotePending() uint64 {
	st := r.remote.Load()
	if stateStatus(st) != stPosted {
		return 0
	}
	ln, done := r.desc[1].Load(), stateProgress(st)
	if done >= ln {
		return 0
	}
	return ln - done
}

// readRemote copies the next bytes of the writer's posted buffer into b, when the writer has
// posted one at this reader's stream position; ok is false when it has not (or withdrew it
// before this reader took anything of it), and the ring is where the stream goes on. rmu and
// ops (read) must be held.
func (p *Pipe) readRemote(b []byte) (n int, ok bool, err error) {
	r := &p.in
	for {
		st := r.remote.Load()
		if stateStatus(st) != stPosted {
			return 0, false, nil
		}
		addr, ln, pos := r.desc[0].Load(), r.desc[1].Load(), r.desc[2].Load()
		done := stateProgress(st)
		if pos != r.pos {
			if pos > r.pos && pos-r.pos <= r.size && r.head.Load() != r.pos {
				return 0, false, nil // ring bytes come first
			}
			return 0, true, p.corrupt("single-copy write posted away from the reader's position", pos, r.pos)
		}
		if !p.readsPeer {
			return 0, true, fmt.Errorf("shm pipe to %s: the peer offered its buffer, but this end cannot read its memory", p.peer)
		}
		if ln == 0 || ln > maxRemote || done >= ln {
			return 0, true, p.corrupt("single-copy progress out of range", done, ln)
		}
		k, err := p.peerMem.read(b[:min(uint64(len(b)), ln-done)], addr+done)
		if err != nil {
			return 0, true, fmt.Errorf("shm pipe to %s: single copy: %w", p.peer, err)
		}
		status := uint64(stPosted)
		if done+uint64(k) == ln {
			status = stDone
		}
		// Publishing the progress is what makes the bytes part of the stream: if the writer
		// withdrew meanwhile, it may already be changing its buffer, and what was copied is
		// dropped.
		if !r.remote.CompareAndSwap(st, remoteState(stateGen(st), status, done+uint64(k))) {
			continue
		}
		if status == stDone {
			p.doorbell(r.wwait, &p.ringW)
		}
		return k, true, nil
	}
}
