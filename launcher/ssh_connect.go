package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Reaching the hosts: one SSH connection per host, dialed once (through its ProxyJump hosts),
// logged in with the host key checked, and kept alive while the job runs.

type dialResult struct {
	done   chan struct{}
	client *ssh.Client
	err    error
}

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	Addr, Files string
	Key         ssh.PublicKey
	// Mismatch is the known key (file:line: key) when the host's key changed; empty when the
	// host is not known at all.
	Mismatch string
}

func (e *HostKeyError) Error() string {
	if e.Mismatch != "" {
		return fmt.Sprintf("the %s host key of %s does NOT match the known one (%s): possible man-in-the-middle attack; refusing to connect",
			e.Key.Type(), e.Addr, e.Mismatch)
	}
	host, port, _ := net.SplitHostPort(e.Addr)
	return fmt.Sprintf("host key of %s (%s %s) is not in known_hosts (%s); refusing to connect: add it with "+
		"`ssh-keyscan -p %s %s >> ~/.ssh/known_hosts` after checking its fingerprint, or pass --ssh-insecure-skip-hostkey on a trusted test network",
		e.Addr, e.Key.Type(), ssh.FingerprintSHA256(e.Key), e.Files, port, host)
}

// HostError is a failure to reach or log in to one host.
type HostError struct {
	Host string // user@host:port
	Err  error
}

func (e *HostError) Error() string { return fmt.Sprintf("ssh to host %s: %v", e.Host, e.Err) }
func (e *HostError) Unwrap() error { return e.Err }

// Connect opens the SSH connection to every remote host of the placement and starts its
// supervisor, in parallel. The error names every host that could not be reached, refused the
// login or has no usable hetsync.
func (s *SSHSpawner) Connect(ctx context.Context) error {
	seen := map[int]bool{}
	var hs []int
	for _, sl := range s.placement {
		if !seen[sl.Host] && !s.hosts[sl.Host].Local() {
			seen[sl.Host] = true
			hs = append(hs, sl.Host)
		}
	}
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, hi := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.session(ctx, hi)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// client returns the connection to host hi, dialing it once.
func (s *SSHSpawner) client(ctx context.Context, hi int) (*ssh.Client, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("ssh spawner is closed")
	}
	if c := s.clients[hi]; c != nil {
		s.mu.Unlock()
		return c, nil
	}
	d := s.dialing[hi]
	if d == nil {
		d = &dialResult{done: make(chan struct{})}
		s.dialing[hi] = d
		s.mu.Unlock()
		d.client, d.err = s.dial(ctx, hi)
		s.mu.Lock()
		if d.err == nil {
			if s.closed {
				d.client.Close()
				d.client, d.err = nil, errors.New("ssh spawner is closed")
			} else {
				s.clients[hi] = d.client
				s.wg.Add(1)
				go s.keepAlive(d.client)
			}
		} else {
			delete(s.dialing, hi) // a later Spawn may try again
		}
		close(d.done)
		s.mu.Unlock()
		return d.client, d.err
	}
	s.mu.Unlock()
	select {
	case <-d.done:
		return d.client, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial connects to host hi, through its ProxyJump hosts when it has some.
func (s *SSHSpawner) dial(ctx context.Context, hi int) (*ssh.Client, error) {
	t := s.targets[hi]
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	var via *ssh.Client
	var jumps []*ssh.Client
	fail := func(err error) (*ssh.Client, error) {
		for i := len(jumps) - 1; i >= 0; i-- {
			jumps[i].Close()
		}
		return nil, err
	}
	for _, hop := range append(append([]*sshTarget(nil), t.jumps...), t) {
		c, err := s.handshake(ctx, hop, via)
		if err != nil {
			if hop != t {
				err = fmt.Errorf("jump host of %s: %w", t.alias, err)
			}
			return fail(err)
		}
		if hop != t {
			jumps = append(jumps, c)
		}
		via = c
	}
	if len(jumps) > 0 {
		s.mu.Lock()
		s.jumps = append(s.jumps, jumps...)
		s.mu.Unlock()
	}
	return via, nil
}

// handshake connects to hop, directly or through the client via, and logs in.
func (s *SSHSpawner) handshake(ctx context.Context, hop *sshTarget, via *ssh.Client) (*ssh.Client, error) {
	addr, who := hop.addr(), hop.who()
	var conn net.Conn
	var err error
	if via == nil {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = via.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &HostError{who, fmt.Errorf("unreachable: no connection within %v (--ssh-timeout): %v", s.cfg.ConnectTimeout, err)}
		}
		return nil, &HostError{who, fmt.Errorf("unreachable: %v", err)}
	}
	// The handshake honours the same deadline and the context.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stopWatch := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: hop.user, Auth: hop.auth, HostKeyCallback: hop.hostKey, Timeout: s.cfg.ConnectTimeout,
	})
	stopWatch()
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return nil, &HostError{who, hk}
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, &HostError{who, fmt.Errorf("the host refused the login of user %s with every key offered (%s): %v", hop.user, hop.keysDesc, err)}
		case ctx.Err() != nil:
			return nil, &HostError{who, fmt.Errorf("no SSH handshake within %v (--ssh-timeout): %v", s.cfg.ConnectTimeout, err)}
		}
		return nil, &HostError{who, err}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// keepAlive probes c; a host that stops answering gets its connection closed, which fails
// its ranks' sessions (and so the job) instead of leaving the launcher waiting forever.
func (s *SSHSpawner) keepAlive(c *ssh.Client) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		res := make(chan error, 1)
		go func() {
			_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
			res <- err
		}()
		select {
		case <-s.stop:
			return
		case err := <-res:
			if err != nil {
				return // the connection is gone; its sessions have failed already
			}
		case <-time.After(3 * s.cfg.KeepAlive):
			fmt.Fprintf(s.log, "hetsync launch: host %s stopped answering SSH keep-alives for %v; closing the connection\n",
				c.RemoteAddr(), 3*s.cfg.KeepAlive)
			c.Close()
			return
		}
	}
}
