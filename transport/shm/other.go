//go:build !linux

package shm

import (
	"errors"
	"io"
	"time"
)

var errNotLinux = errors.New("shm: shared-memory pipes need Linux")

// Segment is a mapped shared-memory file; on this system none can be made.
type Segment struct{}

// Pipe is one end of a shared-memory byte pipe; on this system none can be made.
type Pipe struct{}

// Create fails: shared-memory pipes need Linux.
func Create(opts Options) (*Segment, error) { return nil, errNotLinux }

// Open fails: shared-memory pipes need Linux.
func Open(name string, opts Options) (*Segment, error) { return nil, errNotLinux }

func (s *Segment) Name() string                           { return "" }
func (s *Segment) Path() string                           { return "" }
func (s *Segment) RingSize() int                          { return 0 }
func (s *Segment) Unlink() error                          { return errNotLinux }
func (s *Segment) Close() error                           { return nil }
func (s *Segment) Pipe(link io.ReadCloser) (*Pipe, error) { return nil, errNotLinux }

func (p *Pipe) Read(b []byte) (int, error)         { return 0, errNotLinux }
func (p *Pipe) Write(b []byte) (int, error)        { return 0, errNotLinux }
func (p *Pipe) SetReadDeadline(t time.Time) error  { return errNotLinux }
func (p *Pipe) SetWriteDeadline(t time.Time) error { return errNotLinux }
func (p *Pipe) SetDeadline(t time.Time) error      { return errNotLinux }
func (p *Pipe) CloseWrite() error                  { return errNotLinux }
func (p *Pipe) Close() error                       { return nil }
func (p *Pipe) Peer() string                       { return "" }
func (p *Pipe) RingSize() int                      { return 0 }
func (p *Pipe) Buffered() int                      { return 0 }
func (p *Pipe) WaitReadable() (bool, error)        { return false, errNotLinux }

// SweepStale does nothing: no segment is made on this system.
func SweepStale(dir string, minAge time.Duration) ([]string, error) { return nil, nil }

// SweepUnheld does nothing on this system.
func SweepUnheld(dir string, minAge time.Duration, match func(string) bool) ([]string, error) {
	return nil, nil
}

// HoldLock does nothing on this system.
func HoldLock(fd int) error { return nil }

// SingleCopy reports no single copy either way: no pipe is made on this system.
func (p *Pipe) SingleCopy() (in, out bool, refused error) { return false, false, errNotLinux }

func (p *Pipe) LendMax() int               { return 0 }
func (p *Pipe) Held() int                  { return 0 }
func (p *Pipe) Lend(n int) ([]byte, error) { return nil, errNotLinux }
func (p *Pipe) Return(b []byte)            {}
func (p *Pipe) PeekInto(b []byte) bool     { return false }
