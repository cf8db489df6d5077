package rawsock

import (
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// Sock reads and writes a socket with raw system calls, parking in the netpoller (with
// the connection's deadlines) when the socket is not ready. syscall.Syscall, which net.Conn's
// Read and Write use, tells the Go scheduler that the thread may block: the runtime's monitor
// thread then wakes every 20 µs to see whether the call has blocked, and hands the rank's
// processor to another thread it must wake when the call takes a little longer, as any call
// does on a host whose cores are all busy. A read or write of a non-blocking socket never
// blocks, so those wake-ups are all cost, at every size: a rank of a host with more ranks
// than cores runs with one processor, and a copy of a few hundred KiB into a loopback socket
// takes long enough that every such call would hand the processor on
// (docs/results/tcp-large.md, "Every socket read and write raw").
//
// A raw call keeps the thread's processor for its duration, so a read moves at most rawSlice
// bytes, and a writer lets the rank's other goroutines (its reader, the sender of a large
// schedule, the heartbeats) run after every rawSlice bytes (one writev may move more: what
// the socket's send buffer takes).
type Sock struct {
	raw syscall.RawConn

	// scratch of the callbacks, bound once so that calls allocate nothing
	rbuf  []byte
	rn    int
	rerr  syscall.Errno
	readF func(fd uintptr) bool

	iov    [2]syscall.Iovec
	iovs   []syscall.Iovec
	wn     int64
	werr   syscall.Errno
	budget int // bytes the current writeCall may still move
	writeF func(fd uintptr) bool
}

// New returns nil when c is not a socket whose file descriptor can be reached.
func New(c any) *Sock {
	raw := ConnOf(c)
	if raw == nil {
		return nil
	}
	s := &Sock{raw: raw}
	s.readF = s.readCall
	s.writeF = s.writeCall
	return s
}

// rawSlice is the most bytes one raw read moves, and how many a writer moves before it lets
// the rank's other goroutines run: short enough that their heartbeats and reads keep their
// pace, long enough that the slicing costs a large message nothing against unlimited raw
// calls (docs/results/tcp-large.md, the slice sizes compared).
const rawSlice = 256 << 10

// Read reads at most len(b) bytes (and at most rawSlice), as net.Conn's Read does.
func (s *Sock) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) > rawSlice {
		b = b[:rawSlice]
	}
	s.rbuf, s.rn, s.rerr = b, 0, 0
	err := s.raw.Read(s.readF)
	s.rbuf = nil
	switch {
	case err != nil:
		return 0, err
	case s.rerr != 0:
		return 0, os.NewSyscallError("read", s.rerr)
	case s.rn == 0:
		return 0, io.EOF
	}
	return s.rn, nil
}

func (s *Sock) readCall(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rbuf[0])), uintptr(len(s.rbuf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			s.rn = int(n)
		default:
			s.rerr = e
		}
		return true
	}
}

// WriteFrame writes hdr and payload with one writev, or more when the socket takes part of
// them; after each rawSlice bytes it lets the rank's other goroutines run.
func (s *Sock) WriteFrame(hdr, payload []byte) (int64, error) {
	s.iov[0] = syscall.Iovec{Base: &hdr[0]}
	s.iov[0].SetLen(len(hdr))
	s.iovs = s.iov[:1]
	if len(payload) > 0 {
		s.iov[1] = syscall.Iovec{Base: &payload[0]}
		s.iov[1].SetLen(len(payload))
		s.iovs = s.iov[:2]
	}
	s.wn, s.werr = 0, 0
	var err error
	for {
		s.budget = rawSlice
		err = s.raw.Write(s.writeF)
		if err != nil || s.werr != 0 || len(s.iovs) == 0 {
			break
		}
		runtime.Gosched()
	}
	s.iov = [2]syscall.Iovec{}
	s.iovs = nil
	if err == nil && s.werr != 0 {
		err = os.NewSyscallError("writev", s.werr)
	}
	return s.wn, err
}

func (s *Sock) writeCall(fd uintptr) bool {
	for len(s.iovs) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.iovs[0])), uintptr(len(s.iovs)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until the socket is writable; called again then
		case 0:
		default:
			s.werr = e
			return true
		}
		s.wn += int64(n)
		s.budget -= int(n)
		for k := int(n); k > 0 && len(s.iovs) > 0; {
			if l := int(s.iovs[0].Len); k >= l {
				k -= l
				s.iovs = s.iovs[1:]
				continue
			}
			s.iovs[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(s.iovs[0].Base), k))
			s.iovs[0].SetLen(int(s.iovs[0].Len) - k)
			k = 0
		}
		if s.budget <= 0 {
			return true // more to write: writeFrame yields first
		}
	}
	return true
}

// ConnOf returns the file descriptor access of a socket, nil when c has none.
func ConnOf(c any) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}
