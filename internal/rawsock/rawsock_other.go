//go:build !linux

package rawsock

import "io"

// Sock is implemented on Linux only; elsewhere callers use the connection's own Read and
// Write.
type Sock struct{}

// New returns nil: no socket is read raw on this system.
func New(any) *Sock { return nil }

func (s *Sock) Read([]byte) (int, error)              { return 0, io.EOF }
func (s *Sock) WriteFrame(_, _ []byte) (int64, error) { return 0, io.ErrClosedPipe }
