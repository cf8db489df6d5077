package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// hostSession is the launcher's end of one host's supervisor (Supervise): one SSH session
// that carries every rank of the host. A goroutine hands each frame the supervisor sends to
// its rank; another writes the launcher's requests in the order they were made, so that a
// slow or dead connection never blocks Job.Run and a SIGKILL never overtakes its SIGTERM.
type hostSession struct {
	host string
	sess *ssh.Session
	in   io.WriteCloser

	mu     sync.Mutex
	ranks  map[int]*sshProc
	ended  error // why the session ended; nil while it runs
	queue  [][]byte
	closed bool // no more requests: the writer closes in once the queue is empty
	wake   chan struct{}
	done   chan struct{} // the reader has ended
	stderr bytes.Buffer  // the supervisor's own messages, for errors
}

// openHostSession starts the supervisor on c and waits for its hello, so that a host without
// a usable hetsync fails before any of its ranks is counted as started.
func openHostSession(ctx context.Context, c *ssh.Client, host string, command []string, timeout time.Duration) (*hostSession, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("host %s: opening an SSH session: %w", host, err)
	}
	in, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	h := &hostSession{host: host, sess: sess, in: in, ranks: map[int]*sshProc{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	sess.Stderr = &boundedWriter{mu: &h.mu, buf: &h.stderr, max: 64 << 10}
	quoted := make([]string, len(command))
	for i, a := range command {
		quoted[i] = shellQuote(a)
	}
	cmdline := strings.Join(quoted, " ")
	if err := sess.Start("exec " + cmdline); err != nil {
		sess.Close()
		return nil, fmt.Errorf("host %s: starting the supervisor %s: %w", host, cmdline, err)
	}
	fr := &frameReader{r: out}
	hello := make(chan error, 1)
	go func() {
		kind, _, payload, err := fr.read()
		switch {
		case err != nil:
		case kind != frameHello:
			err = fmt.Errorf("its first frame is %q, not a hello", kind)
		case string(payload) != supervisorProtocol:
			err = fmt.Errorf("it speaks %q, this launcher %q: install the same hetsync on every host", payload, supervisorProtocol)
		}
		hello <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err = <-hello:
	case <-t.C:
		err = fmt.Errorf("no hello within %v (3 × --ssh-timeout)", timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		sess.Close()
		status := ""
		if werr := sess.Wait(); werr != nil {
			status = " (" + werr.Error() + ")"
		}
		h.mu.Lock()
		msg := strings.TrimSpace(h.stderr.String())
		h.mu.Unlock()
		if msg != "" {
			msg = ": " + msg
		}
		return nil, fmt.Errorf("host %s: the supervisor `%s` did not start: %v%s%s; install hetsync at that path there (or name it with --remote-hetsync)",
			host, cmdline, err, status, msg)
	}
	go h.readLoop(fr)
	go h.writeLoop()
	return h, nil
}

// boundedWriter keeps the first max bytes written to it, under mu.
type boundedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
	max int
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// readLoop hands every frame to its rank until the session ends; the ranks still waiting for
// their exit then end with the reason.
func (h *hostSession) readLoop(fr *frameReader) {
	defer close(h.done)
	var err error
	for {
		var kind byte
		var rank int
		var payload []byte
		if kind, rank, payload, err = fr.read(); err != nil {
			break
		}
		h.mu.Lock()
		p := h.ranks[rank]
		if kind == frameExit {
			delete(h.ranks, rank)
		}
		h.mu.Unlock()
		if p == nil {
			err = fmt.Errorf("the supervisor sent a frame %q for rank %d, which does not run there", kind, rank)
			break
		}
		switch kind {
		case frameStdout:
			_, _ = p.stdout.Write(payload)
		case frameStderr:
			_, _ = p.stderr.Write(payload)
		case frameExit:
			var n exitNotice
			if jerr := json.Unmarshal(payload, &n); jerr != nil {
				p.exit <- Exit{Code: -1, Err: fmt.Errorf("host %s: malformed exit notice: %v", h.host, jerr)}
			} else {
				p.exit <- n.exit(h.host)
			}
		default:
			err = fmt.Errorf("the supervisor sent an unknown frame %q for rank %d", kind, rank)
		}
		if err != nil {
			break
		}
	}
	// Closing the session makes a supervisor that is still there stop its ranks.
	h.sess.Close()
	h.mu.Lock()
	if errors.Is(err, io.EOF) || h.closed {
		err = errors.New("the SSH connection ended without the rank's exit status (host down or connection lost)")
	}
	h.ended = fmt.Errorf("host %s: %v", h.host, err)
	if msg := strings.TrimSpace(h.stderr.String()); msg != "" {
		h.ended = fmt.Errorf("%w (the supervisor said: %s)", h.ended, msg)
	}
	lost := h.ranks
	h.ranks = map[int]*sshProc{}
	h.mu.Unlock()
	for _, p := range lost {
		p.exit <- Exit{Code: -1, Err: h.ended}
	}
}

// writeLoop writes the queued requests in order; it closes the supervisor's input when the
// spawner closes, and drops what is left when the session has ended.
func (h *hostSession) writeLoop() {
	for {
		h.mu.Lock()
		q, closed := h.queue, h.closed
		h.queue = nil
		h.mu.Unlock()
		for _, f := range q {
			if _, err := h.in.Write(f); err != nil {
				h.sess.Close()
				return
			}
		}
		if closed && len(q) == 0 {
			_ = h.in.Close()
			return
		}
		select {
		case <-h.wake:
		case <-h.done:
			return
		}
	}
}

// send queues a request; it never blocks on the connection.
func (h *hostSession) send(kind byte, rank int, payload []byte) {
	var b bytes.Buffer
	fw := frameWriter{w: &b}
	_ = fw.write(kind, rank, payload)
	h.mu.Lock()
	if !h.closed {
		h.queue = append(h.queue, b.Bytes())
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// start asks the supervisor to start a rank whose output goes to stdout and stderr.
func (h *hostSession) start(rank int, req startRequest, stdout, stderr io.Writer) (*sshProc, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	p := &sshProc{rank: rank, host: h, stdout: stdout, stderr: stderr, exit: make(chan Exit, 1)}
	h.mu.Lock()
	switch {
	case h.ended != nil:
		h.mu.Unlock()
		return nil, h.ended
	case h.closed:
		h.mu.Unlock()
		return nil, errors.New("ssh spawner is closed")
	case h.ranks[rank] != nil:
		h.mu.Unlock()
		return nil, fmt.Errorf("rank %d already runs on host %s", rank, h.host)
	}
	h.ranks[rank] = p
	h.mu.Unlock()
	h.send(frameStart, rank, payload)
	return p, nil
}

// close closes the supervisor's input once the requests queued before are written: the
// supervisor kills what still runs and exits.
func (h *hostSession) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// sshProc is a rank started by a host's supervisor.
type sshProc struct {
	rank           int
	host           *hostSession
	stdout, stderr io.Writer
	exit           chan Exit
}

func (p *sshProc) Wait() Exit       { return <-p.exit }
func (p *sshProc) Terminate() error { p.host.send(frameTerminate, p.rank, nil); return nil }
func (p *sshProc) Kill() error      { p.host.send(frameKill, p.rank, nil); return nil }
