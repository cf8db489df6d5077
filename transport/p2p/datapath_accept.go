package p2p

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/hetsync/hetsync/transport/shm"
)

// acceptor collects the data connections a rank receives from every lower rank, over any of
// its listeners, after checking each hello.
type acceptor struct {
	cfg   Config
	rank  int
	tag   jobTag
	token []byte
	ids   []peer.ID
	log   *slog.Logger
	h     host.Host

	mu        sync.Mutex
	conns     []io.ReadWriteCloser // index: lower rank
	have      int
	done      chan struct{} // closed when every lower rank is connected
	closed    bool
	pending   map[io.Closer]struct{} // connections still in their hello
	listeners []net.Listener
	wg        sync.WaitGroup
}

func newAcceptor(cfg Config, tag jobTag, token []byte, ids []peer.ID, h host.Host) *acceptor {
	a := &acceptor{cfg: cfg, rank: cfg.Rank, tag: tag, token: token, ids: ids, log: cfg.Logger, h: h,
		conns: make([]io.ReadWriteCloser, cfg.Rank), done: make(chan struct{}),
		pending: make(map[io.Closer]struct{})}
	if cfg.Rank == 0 {
		close(a.done)
	}
	return a
}

// track registers a connection in its hello; false when the acceptor is closed.
func (a *acceptor) track(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.pending[c] = struct{}{}
	a.wg.Add(1)
	return true
}

func (a *acceptor) untrack(c io.Closer) {
	a.mu.Lock()
	delete(a.pending, c)
	a.mu.Unlock()
	a.wg.Done()
}

// serve accepts on l until l is closed; each connection says its hello in the clear.
func (a *acceptor) serve(l net.Listener) {
	a.serveWith(l, func(c net.Conn) {
		if !a.track(c) {
			c.Close()
			return
		}
		go a.handshake(c, c.RemoteAddr().String(), -1)
	})
}

// serveWith accepts on l until l is closed and hands each connection, tuned, to start, which
// must not block.
func (a *acceptor) serveWith(l net.Listener, start func(net.Conn)) {
	a.mu.Lock()
	a.listeners = append(a.listeners, l)
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tuneConn(c)
			start(c)
		}
	}()
}

// handleStream is the libp2p handler of dataProto. The remote peer is a member (the gater saw
// to it); its rank must match the hello's.
func (a *acceptor) handleStream(s network.Stream) {
	if !a.track(s) {
		_ = s.Reset()
		return
	}
	a.handshake(s, s.Conn().RemoteMultiaddr().String()+"/p2p/"+s.Conn().RemotePeer().String(),
		rankOf(a.ids, s.Conn().RemotePeer()))
}

// handshake reads and checks a hello; a good one hands c to the collected connections. A
// hello that offers a shared-memory segment hands over the pipe built on it instead, with c
// kept as the pipe's liveness link.
func (a *acceptor) handshake(c dataConn, remote string, peerRank int) {
	defer a.untrack(c)
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	var b [helloLen + shmNameLen]byte
	if _, err := io.ReadFull(c, b[:helloLen]); err != nil {
		a.log.Warn("hetsync data path: no hello from connection", "rank", a.rank, "remote", remote, "err", err)
		c.Close()
		return
	}
	// The hello came in time; answering it may take longer: a shared-memory hello has this
	// rank create and populate the pair's segment first, which on a host whose ranks outnumber
	// its cores waits behind every other rank doing the same. The dialer waits for the reply
	// until the join's deadline, and so may this side.
	_ = c.SetDeadline(time.Now().Add(max(helloTimeout, a.cfg.JoinTimeout)))
	from := int(binary.BigEndian.Uint32(b[16:]))
	to := int(binary.BigEndian.Uint32(b[20:]))
	offersShm := string(b[:8]) == helloMagicSM
	if offersShm {
		if _, err := io.ReadFull(c, b[helloLen:]); err != nil {
			a.log.Warn("hetsync data path: no segment name after a shared-memory hello", "rank", a.rank,
				"remote", remote, "claimed_rank", from, "err", err)
			c.Close()
			return
		}
	}
	uc, isUnix := c.(*net.UnixConn)
	status := helloOK
	switch {
	case string(b[:8]) != helloMagic && !offersShm:
		status = helloBadMagic
	case subtle.ConstantTimeCompare(b[8:16], a.tag[:]) != 1:
		status = helloWrongJob
	case to != a.rank:
		status = helloWrongTarget
	case from < 0 || from >= a.rank:
		status = helloNotLower
	case peerRank >= 0 && peerRank != from:
		status = helloWrongPeer
	case subtle.ConstantTimeCompare(b[24:helloLen], a.token) != 1:
		status = helloBadToken
	case offersShm && !isUnix:
		status = helloShmNotUnix
	}
	conn := c
	if status == helloOK && offersShm {
		name := string(bytes.TrimRight(b[helloLen:], "\x00"))
		p, err := openShm(uc, name, shmOptions(a.cfg, from))
		if err != nil {
			a.log.Warn("hetsync data path: cannot share memory with a same-host rank", "rank", a.rank,
				"peer", from, "remote", remote, "err", err)
			status = helloShmFailed
		} else {
			conn = p
			a.cfg.logSingleCopy(from, p)
		}
	}
	if status == helloOK {
		status = a.offer(from, conn, c)
	}
	reply := make([]byte, replyLen)
	copy(reply, helloMagic)
	reply[8] = status
	_, werr := c.Write(reply)
	if status != helloOK {
		a.log.Warn("hetsync data path: refused a connection", "rank", a.rank, "remote", remote,
			"claimed_rank", from, "reason", helloStatusText(status))
		conn.Close()
		if conn != c {
			c.Close()
		}
		return
	}
	if werr != nil {
		a.log.Warn("hetsync data path: answering a hello failed", "rank", a.rank, "peer", from, "remote", remote, "err", werr)
	}
	if hs, ok := c.(helloSwitcher); ok {
		hs.helloDone()
	}
	_ = c.SetDeadline(time.Time{})
}

// openShm maps the segment that rank `from` offered over the Unix connection c, removes its
// file (both sides have it mapped now) and returns the pipe over it, with c as its link.
func openShm(c *net.UnixConn, name string, opts shm.Options) (dataConn, error) {
	seg, err := shm.Open(name, opts)
	if err != nil {
		return nil, err
	}
	if err := seg.Unlink(); err != nil {
		seg.Close()
		return nil, err
	}
	// The pipe reads c for as long as it lives, to notice the peer's death: no hello deadline.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		seg.Close()
		return nil, err
	}
	p, err := seg.Pipe(c)
	if err != nil {
		seg.Close()
		return nil, err
	}
	return p, nil
}

// offer collects conn as the connection from rank `from`; key is the connection the hello
// came on (conn itself, or the link of a shared-memory pipe), tracked as pending until now.
func (a *acceptor) offer(from int, conn dataConn, key io.Closer) byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return helloClosed
	}
	if a.conns[from] != nil {
		return helloDuplicate
	}
	// From here on conn belongs to the collected connections, not to the pending ones, so that
	// stop(false) racing with the rest of this handshake cannot close it.
	delete(a.pending, key)
	a.conns[from] = conn
	a.have++
	if a.have == a.rank {
		close(a.done)
	}
	return helloOK
}

// wait returns once every lower rank is connected, or why not.
func (a *acceptor) wait(ctx context.Context) error {
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var missing []int
	for r, c := range a.conns {
		if c == nil {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("rank %d: no data connection from rank(s) %s: %w", a.rank, sortedRanks(missing), ctx.Err())
}

// stop closes the listeners and every connection still in its hello, and waits for the
// acceptor's goroutines. With discard it also closes the connections already collected.
func (a *acceptor) stop(discard bool) {
	a.mu.Lock()
	a.closed = true
	for _, l := range a.listeners {
		l.Close()
	}
	for c := range a.pending {
		c.Close()
	}
	if discard {
		for i, c := range a.conns {
			if c != nil {
				c.Close()
				a.conns[i] = nil
			}
		}
	}
	a.mu.Unlock()
	if a.h != nil {
		a.h.RemoveStreamHandler(dataProto)
	}
	a.wg.Wait()
}
