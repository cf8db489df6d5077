package p2p

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/hetsync/hetsync/transport/shm"
)

// dataProto carries the bulk traffic of the "stream" data path.
const dataProto = protocol.ID("/hetsync/data/1")

const (
	tokenLen     = 32
	helloMagic   = "HSYNCDP1"
	helloMagicSM = "HSYNCSM1"               // a hello that also offers a shared-memory segment (path "shm")
	helloLen     = 8 + 8 + 4 + 4 + tokenLen // magic, job tag, from, to, token
	shmNameLen   = 64                       // after an HSYNCSM1 hello: the segment's file name, NUL-padded
	replyLen     = 8 + 1                    // magic, status
	helloTimeout = 10 * time.Second         // an accepted connection must say hello within this
	socketBuffer = 4 << 20                  // SO_SNDBUF / SO_RCVBUF of direct connections
)

// Hello statuses sent back by the listening rank.
const (
	helloOK byte = iota
	helloBadMagic
	helloWrongJob
	helloWrongTarget
	helloNotLower
	helloBadToken
	helloDuplicate
	helloClosed
	helloWrongPeer
	helloShmNotUnix
	helloShmFailed
)

// autoSameHost is the path "auto" takes between ranks on one host: shared memory. Measured
// against Unix sockets (allreduce busbw, 4 ranks on 2 cores, medians of 3 runs, receivers
// polling both): 4 KiB 0.127 vs 0.069 GB/s, 256 KiB 0.93 vs 0.47, 1 MiB 0.70 vs 0.61, 64 MiB
// 0.69 vs 0.49. Dial offers shared memory and falls back to a Unix socket when the listener
// cannot map the segment.
const autoSameHost = DataPathShm

func helloStatusText(s byte) string {
	switch s {
	case helloOK:
		return "ok"
	case helloBadMagic:
		return "not a hetsync data-path hello"
	case helloWrongJob:
		return "hello from another job"
	case helloWrongTarget:
		return "hello addressed to another rank"
	case helloNotLower:
		return "the dialing rank must be lower than the listening rank"
	case helloBadToken:
		return "bad token"
	case helloDuplicate:
		return "that rank is already connected"
	case helloClosed:
		return "no longer accepting connections"
	case helloWrongPeer:
		return "libp2p peer identity does not match the rank in the hello"
	case helloShmNotUnix:
		return "shared memory offered over a connection that is not a same-host Unix socket"
	case helloShmFailed:
		return "the listener could not map the shared-memory segment (see its log)"
	}
	return "unknown status " + strconv.Itoa(int(s))
}

// pathFor decides the data path between ranks a and b, given whether they proved that they
// share a host (see hostproof.go). The lower rank (the dialer) decides; the listener serves
// whichever path it is dialed on.
func pathFor(cfg Config, a, b peerInfo, loc locality) (string, error) {
	switch cfg.DataPath {
	case DataPathStream, DataPathTCP, DataPathTLS:
		return cfg.DataPath, nil
	case DataPathUnix, DataPathShm, DataPathCMA:
		if !loc.same {
			return "", fmt.Errorf("rank %d (host %q) and rank %d (host %q) do not share a host: %s; DataPath %q needs both on one host",
				a.Rank, a.Hostname, b.Rank, b.Hostname, loc.why, cfg.DataPath)
		}
		return cfg.DataPath, nil
	}
	if loc.same {
		return autoSameHost, nil
	}
	return autoNetwork(cfg), nil
}

// autoNetwork is the path "auto" takes between ranks on different hosts: the direct TLS
// connection when the job asked for security, which is what makes it as safe as the libp2p
// stream (both ends proven by their rank keys, traffic encrypted) at a fraction of the CPU;
// plain TCP when it did not.
func autoNetwork(cfg Config) string {
	if cfg.Security == SecurityNone {
		return DataPathTCP
	}
	return DataPathTLS
}

// needsTCP / needsTLS / needsUnix / needsStream say which listeners a rank opens before the
// rendezvous, when it cannot yet know where its peers run.
func needsTCP(cfg Config) bool {
	return cfg.DataPath == DataPathTCP || (cfg.DataPath == DataPathAuto && autoNetwork(cfg) == DataPathTCP)
}
func needsTLS(cfg Config) bool {
	return cfg.DataPath == DataPathTLS || (cfg.DataPath == DataPathAuto && autoNetwork(cfg) == DataPathTLS)
}
func needsUnix(cfg Config) bool {
	return cfg.DataPath == DataPathUnix || cfg.DataPath == DataPathShm || cfg.DataPath == DataPathCMA || cfg.DataPath == DataPathAuto
}
func needsStream(cfg Config) bool {
	return cfg.DataPath == DataPathStream
}

// unixSocketPath is where rank listens for same-host peers. A file (not the abstract
// namespace) so ranks in different network namespaces of one host still meet.
func unixSocketPath(tag jobTag, rank int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("hetsync-%s-%d.sock", tag, rank))
}

// listenUnix listens on path, replacing a stale socket file left by a dead process.
func listenUnix(path string) (*net.UnixListener, error) {
	if len(path) > 104 {
		return nil, fmt.Errorf("unix socket path %q is longer than 104 bytes (set TMPDIR to a shorter directory)", path)
	}
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return l, err
	}
	if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
		c.Close()
		return nil, fmt.Errorf("unix socket %s is in use by a live process (another rank with the same job secret and rank?)", path)
	}
	if rerr := os.Remove(path); rerr != nil {
		return nil, fmt.Errorf("removing stale unix socket %s: %w", path, rerr)
	}
	return net.ListenUnix("unix", addr)
}

func tuneConn(c net.Conn) {
	switch cc := c.(type) {
	case *net.TCPConn:
		_ = cc.SetNoDelay(true)
		_ = cc.SetReadBuffer(socketBuffer)
		_ = cc.SetWriteBuffer(socketBuffer)
	case *net.UnixConn:
		_ = cc.SetReadBuffer(socketBuffer)
		_ = cc.SetWriteBuffer(socketBuffer)
	}
}

// deadliner is what both net.Conn and network.Stream offer.
type deadliner interface {
	SetDeadline(time.Time) error
}

type dataConn interface {
	io.ReadWriteCloser
	deadliner
}

func encodeHello(tag jobTag, from, to int, token []byte) []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic)
	copy(b[8:], tag[:])
	binary.BigEndian.PutUint32(b[16:], uint32(from))
	binary.BigEndian.PutUint32(b[20:], uint32(to))
	copy(b[24:], token)
	return b
}

// encodeShmHello is a hello that offers the shared-memory segment named shmName: the hello
// with magic HSYNCSM1, followed by the name padded to shmNameLen bytes.
func encodeShmHello(tag jobTag, from, to int, token []byte, shmName string) []byte {
	b := append(encodeHello(tag, from, to, token), make([]byte, shmNameLen)...)
	copy(b, helloMagicSM)
	copy(b[helloLen:], shmName)
	return b
}

// shmOptions are the pipe options of the shared-memory path to rank peer. Only "cma" moves
// writes with a single copy: on the 2-core machines the project is measured on,
// process_vm_readv copies slower than two copies through a ring that stays in cache, and a
// write that waits for the peer's reader costs a wake-up more (docs/results/cma.md).
func shmOptions(cfg Config, peer int) shm.Options {
	o := shm.Options{Peer: "rank " + strconv.Itoa(peer), SingleCopyMin: -1}
	if cfg.DataPath == DataPathCMA {
		o.SingleCopyMin, o.SingleCopyMax = cfg.SingleCopyMin, cfg.SingleCopyMax
	}
	return o
}

// logSingleCopy reports, on the "cma" path, a peer whose memory this rank may not read: its
// large writes to this rank take the rings (see DataPaths for what each pair uses).
func (cfg Config) logSingleCopy(peer int, c dataConn) {
	p, ok := c.(*shm.Pipe)
	if !ok || cfg.DataPath != DataPathCMA {
		return
	}
	if in, _, refused := p.SingleCopy(); !in {
		cfg.Logger.Warn("hetsync data path: no single copy from a same-host rank, its writes take the shared-memory rings",
			"rank", cfg.Rank, "peer", peer, "err", refused)
	}
}

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

// dialer opens the data connections from one rank to every higher rank.
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
		if d.cfg.DataPath != DataPathAuto || ctx.Err() != nil {
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
	var nd net.Dialer
	switch path {
	case DataPathTCP:
		if them.TCP == "" {
			return nil, errors.New("the peer has no TCP listener")
		}
		c, err := nd.DialContext(ctx, "tcp", them.TCP)
		if err != nil {
			return nil, err
		}
		tuneConn(c)
		return c, nil
	case DataPathUnix:
		if them.Unix == "" {
			return nil, errors.New("the peer has no unix socket")
		}
		c, err := nd.DialContext(ctx, "unix", them.Unix)
		if err != nil {
			return nil, err
		}
		tuneConn(c)
		return c, nil
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
		return fmt.Errorf("refused: %s", helloStatusText(r[8]))
	}
	if hs, ok := c.(helloSwitcher); ok {
		hs.helloDone()
	}
	if !stop() {
		return ctx.Err()
	}
	return c.SetDeadline(time.Time{})
}
