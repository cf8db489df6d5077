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
