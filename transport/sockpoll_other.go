//go:build !linux

package transport

import "io"

// sockPoll is implemented on Linux only; elsewhere receivers never poll.
type sockPoll struct{}

func newSockPoll(c io.ReadWriteCloser) *sockPoll { return nil }

func (s *sockPoll) inq() (int, error)   { return 0, nil }
func (s *sockPoll) waitReadable() error { return nil }
func (s *sockPoll) atEOF() bool         { return false }

func yieldCPU() {}

// rawSock is implemented on Linux only; elsewhere frames go through the connection's own
// Read and Write.
type rawSock struct{}

func newRawSock(io.ReadWriter) *rawSock { return nil }

func (s *rawSock) Read([]byte) (int, error)              { return 0, io.EOF }
func (s *rawSock) writeFrame(_, _ []byte) (int64, error) { return 0, io.ErrClosedPipe }
