package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/hetsync/hetsync/transport/shm"
)

// dialer opens the data connections from one rank to its peers.
type dialer struct {
	cfg   Config
	tag   jobTag
	ids   []peer.ID
	peers []peerInfo
	local []locality // this rank's verdict on every rank's host
	h     host.Host
	tls   *rankTLS // nil unless the job may use the "tls" path
	// fullOnce logs a full /dev/shm once per join, not once per peer.
	fullOnce sync.Once
}

// dial connects to rank `to` over the pair's data path and says hello.
func (d *dialer) dial(ctx context.Context, to int) (dataConn, error) {
	me, them := d.peers[d.cfg.Rank], d.peers[to]
	path, err := pathFor(d.cfg, me, them, d.local[to])
	if err != nil {
		return nil, fmt.Errorf("rank %d: data connection to rank %d: %w", d.cfg.Rank, to, err)
	}
	if path == DataPathShm || path == DataPathCMA {
		c, err := d.dialShm(ctx, to, them)
		if err == nil {
			return c, nil
		}
		if d.cfg.DataPath != DataPathAuto || ctx.Err() != nil || crossedDial(err) {
			return nil, fmt.Errorf("rank %d: shm data connection to rank %d: %w", d.cfg.Rank, to, err)
		}
		// auto: the memory could not be shared (no /dev/shm, separate mount namespaces); a
		// plain Unix socket, or the network path, still works. A full /dev/shm is the host's
		// problem to fix, and slows the job: it is said once, at warn.
		var full *shm.FullError
		if errors.As(err, &full) {
			d.fullOnce.Do(func() {
				d.cfg.Logger.Warn("hetsync data path: shared memory is full, using Unix sockets instead",
					"rank", d.cfg.Rank, "peer", to, "err", err)
			})
		} else {
			d.cfg.Logger.Debug("hetsync data path: shared memory unavailable, falling back",
				"rank", d.cfg.Rank, "peer", to, "path", DataPathUnix, "err", err)
		}
		path = DataPathUnix
	}
	c, err := d.open(ctx, path, them)
	if err != nil && path == DataPathUnix && d.cfg.DataPath == DataPathAuto {
		// A proven host but no reachable socket (ranks with different TMPDIRs, say): fall back
		// to the network path, which the peer serves too.
		fallback := autoNetwork(d.cfg)
		d.cfg.Logger.Debug("hetsync data path: unix socket unreachable, falling back",
			"rank", d.cfg.Rank, "peer", to, "path", fallback, "err", err)
		path = fallback
		c, err = d.open(ctx, path, them)
	}
	if err != nil {
		return nil, fmt.Errorf("rank %d: %s data connection to rank %d: %w", d.cfg.Rank, path, to, err)
	}
	if err := d.hello(ctx, c, encodeHello(d.tag, d.cfg.Rank, to, them.Token)); err != nil {
		c.Close()
		return nil, fmt.Errorf("rank %d: %s data connection to rank %d: %w", d.cfg.Rank, path, to, err)
	}
	return c, nil
}

// dialShm connects to rank `to`'s Unix socket, creates a shared-memory segment, offers its
// name in the hello (the socket is private to the host and the hello carries the token), and
// once the peer has mapped it returns the pipe over it, with the socket as its liveness link.
func (d *dialer) dialShm(ctx context.Context, to int, them peerInfo) (dataConn, error) {
	// The segment first: a /dev/shm too full for it then fails here, before a connection is
	// opened that the peer would only see end before its hello.
	opts := shmOptions(d.cfg, to)
	var err error
	if opts.RingSize, err = shm.HostRingSize(d.localRanks(), d.cfg.ShmHostBudget); err != nil {
		return nil, err
	}
	seg, err := shm.Create(opts)
	if err != nil {
		return nil, err
	}
	c, err := d.open(ctx, DataPathUnix, them)
	if err != nil {
		seg.Close()
		return nil, err
	}
	fail := func(err error) (dataConn, error) {
		seg.Close()
		c.Close()
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fail(fmt.Errorf("the Unix dial returned a %T", c))
	}
	if err := d.hello(ctx, c, encodeShmHello(d.tag, d.cfg.Rank, to, them.Token, seg.Name())); err != nil {
		return fail(err)
	}
	if err := seg.Unlink(); err != nil {
		return fail(err)
	}
	p, err := seg.Pipe(uc)
	if err != nil {
		return fail(err)
	}
	d.cfg.logSingleCopy(to, p)
	return p, nil
}

// localRanks is how many ranks this rank proved on its host, itself included. The dialer
// creates the segment of each pair and so alone sizes its rings; the listener maps whatever
// it is offered.
func (d *dialer) localRanks() int {
	n := 0
	for _, l := range d.local {
		if l.same {
			n++
		}
	}
	return max(n, 1)
}

func (d *dialer) open(ctx context.Context, path string, them peerInfo) (dataConn, error) {
	switch path {
	case DataPathTCP:
		return dialSocket(ctx, "tcp", them.TCP, "TCP listener")
	case DataPathUnix:
		return dialSocket(ctx, "unix", them.Unix, "unix socket")
	case DataPathTLS:
		return d.dialTLS(ctx, them)
	default:
		s, err := d.h.NewStream(ctx, d.ids[them.Rank], dataProto)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// dialSocket connects to a peer's direct listener at addr ("" when the peer has none, named
// what in the error) and tunes the connection as the listening side tunes its own.
func dialSocket(ctx context.Context, network, addr, what string) (dataConn, error) {
	if addr == "" {
		return nil, fmt.Errorf("the peer has no %s", what)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tuneConn(c)
	return c, nil
}

// hello sends msg, a hello, and waits for the listener's answer.
func (d *dialer) hello(ctx context.Context, c dataConn, msg []byte) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	var r [replyLen]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return fmt.Errorf("waiting for the hello reply: %w", err)
	}
	if string(r[:8]) != helloMagic {
		return errors.New("the peer answered the hello with garbage")
	}
	if r[8] != helloOK {
		return &helloRefusedError{status: r[8]}
	}
	if hs, ok := c.(helloSwitcher); ok {
		hs.helloDone()
	}
	if !stop() {
		return ctx.Err()
	}
	return c.SetDeadline(time.Time{})
}
