package launcher

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// The host supervisor and the launcher talk over the supervisor's SSH session in frames: a
// kind byte, the rank (uint32, big-endian), the payload length (uint32) and the payload. One
// session carries every rank of a host, so a host runs any number of ranks however few
// sessions its sshd allows per connection (OpenSSH's MaxSessions is 10 by default).
const (
	// Launcher to supervisor.
	frameStart     = 'S' // payload: startRequest as JSON
	frameTerminate = 'T' // SIGTERM to the rank's process group
	frameKill      = 'K' // SIGKILL to the rank's process group
	// Supervisor to launcher.
	frameHello  = 'H' // payload: the protocol version; the first frame of every session
	frameStdout = 'O' // payload: output of the rank
	frameStderr = 'E'
	frameExit   = 'X' // payload: exitNotice as JSON; the rank's last frame
)

// supervisorProtocol is the version a supervisor says hello with; a launcher refuses any other,
// so that a host with another hetsync build fails at once, by name, instead of mid-job.
const supervisorProtocol = "hetsync-supervise/1"

// maxFramePayload bounds a frame's payload: a corrupt or foreign stream fails with an error
// instead of making the reader allocate gigabytes.
const maxFramePayload = 16 << 20

const frameHeader = 9

// startRequest asks the supervisor to start one rank.
type startRequest struct {
	Argv []string
	// Env is added to the supervisor's own environment (the host's login environment).
	Env []string
	// Dir is the working directory; MustDir makes a missing Dir an error (--remote-dir)
	// instead of leaving the rank in the login directory.
	Dir     string
	MustDir bool
	// Host is the host's name in the launcher's host list, for error messages.
	Host string
}

// exitNotice says how a rank ended. Signal is the signal's name as SSH spells it ("KILL"),
// so that both ends agree on it whatever their operating systems number it.
type exitNotice struct {
	Code   int
	Signal string `json:",omitempty"`
	Err    string `json:",omitempty"`
}

// frameWriter writes whole frames to one stream, from any goroutine.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	hdr [frameHeader]byte
}

func (f *frameWriter) write(kind byte, rank int, payload []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hdr[0] = kind
	binary.BigEndian.PutUint32(f.hdr[1:5], uint32(rank))
	binary.BigEndian.PutUint32(f.hdr[5:9], uint32(len(payload)))
	if _, err := f.w.Write(f.hdr[:]); err != nil {
		return err
	}
	_, err := f.w.Write(payload)
	return err
}

// frameReader reads the frames of one stream; its payload buffer is reused by the next read.
type frameReader struct {
	r   io.Reader
	hdr [frameHeader]byte
	buf []byte
}

// read returns the next frame. At a clean end of the stream it returns io.EOF.
func (f *frameReader) read() (kind byte, rank int, payload []byte, err error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("stream cut inside a frame header: %w", err)
		}
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(f.hdr[5:9])
	if n > maxFramePayload {
		return 0, 0, nil, fmt.Errorf("frame %q of rank %d announces %d bytes (at most %d): not a hetsync supervisor stream",
			f.hdr[0], binary.BigEndian.Uint32(f.hdr[1:5]), n, maxFramePayload)
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		return 0, 0, nil, fmt.Errorf("stream cut inside a frame: %w", err)
	}
	return f.hdr[0], int(binary.BigEndian.Uint32(f.hdr[1:5])), f.buf, nil
}

// streamWriter is an io.Writer that sends everything written to it as frames of one kind and
// rank: a rank's stdout or stderr on the supervisor's side.
type streamWriter struct {
	fw   *frameWriter
	kind byte
	rank int
}

func (s streamWriter) Write(b []byte) (int, error) {
	if err := s.fw.write(s.kind, s.rank, b); err != nil {
		return 0, err
	}
	return len(b), nil
}
