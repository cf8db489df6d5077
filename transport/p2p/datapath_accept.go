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

// acceptor takes the data connections that peers dial to this rank, over any of its
// listeners, after checking each hello, and keeps this rank's links: the connection it holds
// to each peer (dialed or accepted) and the peers it is dialing now, so that two ranks that
// dial each other at once keep one connection, the lower rank's (dialPeer). Connections
// accepted while the job forms wait in conns for the endpoint; after that, each goes to the
// endpoint (attach) as soon as its hello is answered.
type acceptor struct {
	cfg   Config
	rank  int
	tag   jobTag
	token []byte
	ids   []peer.ID
	log   *slog.Logger
	h     host.Host
	// linked learns every peer this rank links to (the heartbeats watch it); may be nil.
	linked func(peer int)

	mu      sync.Mutex
	conns   []io.ReadWriteCloser // index: peer rank; dialed or accepted
	dialing []bool               // this rank is dialing the peer now
	// arrived holds, for a peer whose connection is awaited or came, a channel closed once
	// conns[peer] belongs to the endpoint (or, while joining, is ready for it).
	arrived map[int]chan struct{}
	// attach hands an accepted connection to the endpoint; nil while the job forms.
	attach    func(peer int, c io.ReadWriteCloser) error
	closed    bool
	pending   map[io.Closer]struct{} // connections still in their hello
	listeners []net.Listener
	wg        sync.WaitGroup
}

func newAcceptor(cfg Config, tag jobTag, token []byte, ids []peer.ID, h host.Host) *acceptor {
	return &acceptor{cfg: cfg, rank: cfg.Rank, tag: tag, token: token, ids: ids, log: cfg.Logger, h: h,
		conns: make([]io.ReadWriteCloser, cfg.Size), dialing: make([]bool, cfg.Size),
		arrived: make(map[int]chan struct{}), pending: make(map[io.Closer]struct{})}
}

// arrival is the channel closed when peer's connection is there; a.mu must be held.
func (a *acceptor) arrival(peer int) chan struct{} {
	ch := a.arrived[peer]
	if ch == nil {
		ch = make(chan struct{})
		a.arrived[peer] = ch
	}
	return ch
}

// isArrived says whether peer's connection is there; a.mu must be held.
func (a *acceptor) isArrived(peer int) bool {
	ch := a.arrived[peer]
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
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
	case from < 0 || from >= a.cfg.Size || from == a.rank:
		status = helloBadFrom
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
	a.deliver(from, conn)
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

// offer takes conn as the connection from rank `from`, unless this rank has one to it already
// or is dialing it and is the lower of the two (its own dial wins: the peer then waits for it);
// key is the connection the hello came on (conn itself, or the link of a shared-memory pipe),
// tracked as pending until now. The connection is reserved, not yet delivered: the reply to
// the hello must go out before the endpoint may write on it (deliver).
func (a *acceptor) offer(from int, conn dataConn, key io.Closer) byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return helloClosed
	case a.conns[from] != nil:
		return helloDuplicate
	case a.dialing[from] && a.rank < from:
		return helloCrossed
	}
	// From here on conn belongs to the links, not to the pending ones, so that stop racing
	// with the rest of this handshake cannot close it.
	delete(a.pending, key)
	a.conns[from] = conn
	return helloOK
}

// deliver hands the reserved connection from rank `from` to the endpoint (or, while the job
// forms, marks it ready for it) once its hello is answered.
func (a *acceptor) deliver(from int, conn dataConn) {
	a.mu.Lock()
	if a.attach != nil {
		if err := a.attach(from, conn); err != nil {
			a.conns[from] = nil
			a.mu.Unlock()
			a.log.Warn("hetsync data path: the endpoint refused a connection", "rank", a.rank, "peer", from, "err", err)
			conn.Close()
			return
		}
	}
	close(a.arrival(from))
	a.mu.Unlock()
	if a.linked != nil {
		a.linked(from)
	}
}

// await returns once peer's connection is there (dialed by either side), or why not.
func (a *acceptor) await(ctx context.Context, peer int) error {
	a.mu.Lock()
	ch := a.arrival(peer)
	a.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rank %d: no data connection from rank %d: %w", a.rank, peer, ctx.Err())
	}
}

// dialPeer opens this rank's link to peer through d, within timeout, unless it has one: the
// connection, or nil when the peer's own connection came instead (accepted before, or while,
// this rank dialed: when both dial at once, the lower rank's connection is kept, and the
// higher rank's dial is refused as crossed and waits for it). The endpoint connects through it
// (transport.DialFunc).
func (a *acceptor) dialPeer(ctx context.Context, d *dialer, peer int, timeout time.Duration) (io.ReadWriteCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("rank %d: data connection to rank %d: the endpoint is closing", a.rank, peer)
	}
	if a.conns[peer] != nil {
		ch := a.arrival(peer)
		a.mu.Unlock()
		return nil, a.awaitPeers(ctx, peer, ch, timeout)
	}
	a.dialing[peer] = true
	a.mu.Unlock()
	c, err := d.dial(ctx, peer)
	a.mu.Lock()
	a.dialing[peer] = false
	if err == nil && a.conns[peer] == nil && !a.closed {
		a.conns[peer] = c
		close(a.arrival(peer))
		a.mu.Unlock()
		if a.linked != nil {
			a.linked(peer)
		}
		return c, nil
	}
	if err == nil {
		// The peer's connection was taken meanwhile (the rules above keep this from
		// happening), or the endpoint is closing: one connection per pair.
		c.Close()
	} else if !crossedDial(err) {
		a.mu.Unlock()
		return nil, err
	}
	ch := a.arrival(peer)
	a.mu.Unlock()
	return nil, a.awaitPeers(ctx, peer, ch, timeout)
}

// awaitPeers waits on ch for the connection that peer dialed to this rank.
func (a *acceptor) awaitPeers(ctx context.Context, peer int, ch <-chan struct{}, timeout time.Duration) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rank %d: rank %d dialed this rank at the same time, and its data connection did not come within %v: %w",
			a.rank, peer, timeout, ctx.Err())
	}
}

// own makes the endpoint the owner of every connection there now, and of every later one:
// it calls build with those connections (nil entries for the others), and from then on hands
// each accepted connection to attach. Under a.mu, so that none falls between the two.
func (a *acceptor) own(build func(conns []io.ReadWriteCloser) (func(int, io.ReadWriteCloser) error, error)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	conns := make([]io.ReadWriteCloser, len(a.conns))
	for r, c := range a.conns {
		if c != nil && a.isArrived(r) {
			conns[r] = c
		}
	}
	attach, err := build(conns)
	if err != nil {
		return err
	}
	a.attach = attach
	return nil
}

// links returns the connections this rank holds, indexed by peer (nil: none).
func (a *acceptor) links() []io.ReadWriteCloser {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]io.ReadWriteCloser, len(a.conns))
	for r, c := range a.conns {
		if c != nil && a.isArrived(r) {
			out[r] = c
		}
	}
	return out
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
