package transport

import (
	"io"
	"os"
	"syscall"
	"unsafe"

	"github.com/hetsync/hetsync/internal/rawsock"
)

// sockPoll looks at a socket without reading it: how many bytes wait in its receive queue, and
// a wait for readability that parks the goroutine in the netpoller without consuming anything.
// It lets a receiver poll for its message (see streamPeer.poll) while the connection's reader
// goroutine waits for data without holding the read side.
type sockPoll struct {
	raw syscall.RawConn

	// scratch of the RawConn callbacks, bound once so that calls allocate nothing
	inqN, inqErr int
	inqFn        func(fd uintptr)
	readyErr     error
	eof          bool
	readyFn      func(fd uintptr) bool
	peek         [1]byte
}

// newSockPoll returns nil when c is not a socket whose file descriptor can be reached.
func newSockPoll(c io.ReadWriteCloser) *sockPoll {
	raw := rawsock.ConnOf(c)
	if raw == nil {
		return nil
	}
	s := &sockPoll{raw: raw}
	s.inqFn = s.inqCall
	s.readyFn = s.readyCall
	// A socket type without FIONREAD (or a closed one) is not worth polling.
	if _, err := s.inq(); err != nil {
		return nil
	}
	return s
}

// inq returns the number of bytes in the socket's receive queue.
func (s *sockPoll) inq() (int, error) {
	s.inqN, s.inqErr = 0, 0
	if err := s.raw.Control(s.inqFn); err != nil {
		return 0, err
	}
	if s.inqErr != 0 {
		return 0, syscall.Errno(s.inqErr)
	}
	return s.inqN, nil
}

func (s *sockPoll) inqCall(fd uintptr) {
	var n int32
	_, _, e := syscall.RawSyscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	s.inqN, s.inqErr = int(n), int(e)
}

// waitReadable parks until the socket has data (or end of stream, or an error) without reading
// any of it. It returns the deadline or close error of the connection, as a Read would.
func (s *sockPoll) waitReadable() error {
	s.readyErr, s.eof = nil, false
	if err := s.raw.Read(s.readyFn); err != nil {
		return err
	}
	return s.readyErr
}

func (s *sockPoll) readyCall(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.peek[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until the netpoller reports the socket readable
		case 0:
			s.eof = n == 0 // end of stream: the next Read returns it
			return true
		default:
			s.readyErr = os.NewSyscallError("recvfrom", e)
			return true
		}
	}
}

// atEOF reports whether the last waitReadable found the end of the stream.
func (s *sockPoll) atEOF() bool { return s.eof }

// yieldCPU gives the processor to another runnable thread, as MPI progress loops do when the
// host is oversubscribed.
//
// The system calls of a polling receiver (this one, FIONREAD, the peeking recvfrom) never
// block, so they are raw: syscall.Syscall tells the Go scheduler that the thread may block,
// which wakes the runtime's monitor thread on entry and exit, and a sched_yield that lets
// other processes run for a while looks to that monitor like a blocked call, so it hands the
// rank's processor to another thread it has to wake. On a host whose ranks outnumber its
// cores, those wake-ups cost more than the poll saves.
func yieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
