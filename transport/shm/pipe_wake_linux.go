//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hetsync/hetsync/internal/rawsock"
)

// How the two ends of a pipe wake each other: a doorbell byte over the link, a watcher that
// reads it, and the spin, yield and sleep of an end that finds nothing to do.

// Doorbells: the byte one end sends the other over the link to wake its reader (data is
// there) or its writer (room is there).
const (
	bellRead  = 'r'
	bellWrite = 'w'
)

// watch reads the link: doorbells wake this end's reader or writer; the end of the link,
// while the pipe is open, means the peer is gone.
func (p *Pipe) watch(link io.Reader) {
	defer close(p.watchDone)
	var b [64]byte
	// A raw read, once per doorbell, keeps the rank's processor: through the link's own Read
	// it would wake the runtime's monitor thread in a rank that was idle, on every rank of a
	// host whose ranks outnumber its cores (see package rawsock).
	read := link.Read
	if raw := rawsock.New(link); raw != nil {
		read = raw.Read
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

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
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
