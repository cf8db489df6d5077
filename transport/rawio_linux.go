package transport

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// rawSock reads and writes a socket with raw system calls, parking in the netpoller (with
// the connection's deadlines) when the socket is not ready. syscall.Syscall, which net.Conn's
// Read and Write use, tells the Go scheduler that the thread may block: the runtime's monitor
// thread then wakes every 20 µs to see whether the call has blocked, and hands the rank's
// processor to another thread it must wake when the call takes a little longer, as any call
// does on a host whose cores are all busy. A read or write of a non-blocking socket never
// blocks, so for small frames those wake-ups are all cost.
type rawSock struct {
	raw  syscall.RawConn
	conn io.ReadWriter // for the calls that move more than rawMax

	// scratch of the callbacks, bound once so that calls allocate nothing
	rbuf  []byte
	rn    int
	rerr  syscall.Errno
	readF func(fd uintptr) bool

	iov    [2]syscall.Iovec
	iovs   []syscall.Iovec
	wn     int64
	werr   syscall.Errno
	writeF func(fd uintptr) bool
}

// newRawSock returns nil when c is not a socket whose file descriptor can be reached.
func newRawSock(c io.ReadWriter) *rawSock {
	raw := rawConnOf(c)
	if raw == nil {
		return nil
	}
	s := &rawSock{raw: raw, conn: c}
	s.readF = s.readCall
	s.writeF = s.writeCall
	return s
}

// Read reads at most len(b) bytes, as net.Conn's Read does.
func (s *rawSock) Read(b []byte) (int, error) {
	if len(b) > rawMax || len(b) == 0 {
		return s.conn.Read(b)
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

func (s *rawSock) readCall(fd uintptr) bool {
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

// writeFrame writes hdr and payload with one writev, or more when the socket takes part of
// them. The caller keeps frames larger than rawMax for the connection's own Write.
func (s *rawSock) writeFrame(hdr, payload []byte) (int64, error) {
	s.iov[0] = syscall.Iovec{Base: &hdr[0]}
	s.iov[0].SetLen(len(hdr))
	s.iovs = s.iov[:1]
	if len(payload) > 0 {
		s.iov[1] = syscall.Iovec{Base: &payload[0]}
		s.iov[1].SetLen(len(payload))
		s.iovs = s.iov[:2]
	}
	s.wn, s.werr = 0, 0
	err := s.raw.Write(s.writeF)
	s.iov = [2]syscall.Iovec{}
	s.iovs = nil
	if err == nil && s.werr != 0 {
		err = os.NewSyscallError("writev", s.werr)
	}
	return s.wn, err
}

func (s *rawSock) writeCall(fd uintptr) bool {
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
	}
	return true
}

// rawConnOf returns the file descriptor access of a socket, nil when c has none.
func rawConnOf(c any) syscall.RawConn {
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
