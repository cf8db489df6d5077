package p2p

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/hetsync/hetsync/internal/procstat"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// Join starts this rank's libp2p host, meets the other ranks through rank 0 and returns the
// framed Endpoint over the configured data path. The endpoint connects to a peer when a Send
// or Recv first needs it (within cfg.JoinTimeout, or fails naming the peer), and takes the
// connections peers open to it, so that a rank holds connections only to the peers its
// collectives talk to. Endpoint.Close closes the libp2p host and every connection. Join gives
// up after cfg.JoinTimeout (or when ctx ends) with an error that names the ranks it was
// waiting for.
func Join(ctx context.Context, cfg Config) (transport.Endpoint, error) {
	return join(ctx, cfg, nil)
}

// hooks let in-process tests observe a join: where rank 0 listens (so rank 0 can use port 0)
// and which ranks have registered with it.
type hooks struct {
	bound      func(rendezvous string)
	registered func(rank int)
	// progressInterval, when set, is how often rank 0 logs the join's progress.
	progressInterval time.Duration
	// answered, when set, learns what rank 0 sent each rank: the table, or its parent.
	answered func(rank int, full bool)
	// arenaMap, when set, runs before a rank maps (or rank 0 creates) the arena; an error
	// stands for a mapping that failed.
	arenaMap func(rank int) error
}

// join is Join with test hooks; h may be nil.
func join(ctx context.Context, cfg Config, hk *hooks) (transport.Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	timeout := cfg.JoinTimeout
	if timeout == 0 {
		timeout = DefaultJoinTimeout
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := cfg.withDefaults(ctx)
	if err != nil {
		return nil, err
	}
	j := &joiner{cfg: cfg, start: start}
	ep, err := j.run(ctx, hk)
	if err != nil {
		j.teardown()
		return nil, err
	}
	return ep, nil
}

// refusalGrace is how long a rank that refuses the job's data path (checkPairs) keeps its proof
// file and libp2p host up before tearing them down.
const refusalGrace = time.Second

// joiner holds what Join has built so far, so a failure tears down exactly that.
type joiner struct {
	cfg   Config
	start time.Time // when Join began: its timeout counts from here
	h     host.Host
	acc   *acceptor
	proof *proofFile
	hb    *heartbeats // nil when off
}

func (j *joiner) teardown() {
	if j.acc != nil {
		j.acc.stop(true)
	}
	if j.hb != nil {
		j.hb.close()
	}
	if j.h != nil {
		j.h.Close()
	}
	if j.hb != nil {
		j.hb.wait()
	}
	j.proof.remove()
}

func (j *joiner) run(ctx context.Context, hk *hooks) (transport.Endpoint, error) {
	cfg := j.cfg
	ids, err := jobIDs(cfg.Secret, cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	sk, err := rankKey(cfg.Secret, cfg.Rank)
	if err != nil {
		return nil, fmt.Errorf("rank %d: deriving the identity key: %w", cfg.Rank, err)
	}
	tag := newJobTag(cfg.Secret)
	rdv, err := resolveRendezvous(ctx, cfg.Rendezvous)
	if err != nil {
		return nil, fmt.Errorf("rank %d: resolving rendezvous %s: %w", cfg.Rank, cfg.Rendezvous, err)
	}
	hostIP := net.ParseIP(cfg.Host)
	port := 0
	if cfg.Rank == 0 {
		port = rdv.Port
	}
	listen, err := tcpMultiaddr(hostIP, port)
	if err != nil {
		return nil, fmt.Errorf("rank %d: listen address %s: %w", cfg.Rank, cfg.Host, err)
	}
	if port != 0 {
		if err := checkPortFree(hostIP, port); err != nil {
			return nil, fmt.Errorf("rank 0: the rendezvous address %s: %w", cfg.Rendezvous, err)
		}
	}
	gater := newMemberGater(ids)
	j.h, err = newHost(sk, listen, cfg.Security, gater)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	h := j.h
	j.hb = newHeartbeats(cfg, h, ids)
	ts := newTableServer(cfg.Rank, ids, ctx.Done())
	h.SetStreamHandler(tableProto, ts.handle)
	var rs *rendezvousServer
	if cfg.Rank == 0 {
		bound0, err := boundTCP(h)
		if err != nil {
			return nil, fmt.Errorf("rank 0: %w", err)
		}
		if port == 0 {
			cfg.Rendezvous = net.JoinHostPort(cfg.Host, strconv.Itoa(bound0.Port))
		}
		rs = newRendezvousServer(cfg, ids)
		if hk != nil {
			rs.registered = hk.registered
			rs.progressInterval = hk.progressInterval
			rs.answered = hk.answered
		}
		h.SetStreamHandler(rendezvousProto, rs.handle)
		if hk != nil && hk.bound != nil {
			hk.bound(cfg.Rendezvous)
		}
	}

	token := make([]byte, tokenLen)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("rank %d: drawing the data-path token: %w", cfg.Rank, err)
	}
	var rt *rankTLS
	if needsTLS(cfg) {
		if rt, err = newRankTLS(cfg.Rank, sk, ids); err != nil {
			return nil, err
		}
	}
	j.acc = newAcceptor(cfg, tag, token, ids, h)
	if j.hb != nil {
		j.acc.linked = j.hb.watch
	}
	sweepLeftovers(cfg.Logger, shm.DefaultDir, os.TempDir(), staleAge)
	if j.proof, err = newProofFile(shm.DefaultDir, tag, cfg.Rank); err != nil {
		return nil, fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	osHostname, _ := os.Hostname()
	self := peerInfo{Rank: cfg.Rank, Size: cfg.Size, LocalRank: cfg.LocalRank, Hostname: osHostname,
		Token: token, Security: cfg.Security, DataPath: cfg.DataPath,
		HostOverride: cfg.Hostname, Proof: j.proof.proof, Proc: procstat.Self()}
	for _, a := range h.Network().ListenAddresses() {
		self.Addrs = append(self.Addrs, a.String())
	}
	// Any rank may dial any other when it first needs it: every rank listens.
	{
		if needsTCP(cfg) {
			l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: hostIP})
			if err != nil {
				return nil, fmt.Errorf("rank %d: direct TCP listener on %s: %w", cfg.Rank, cfg.Host, err)
			}
			self.TCP = l.Addr().String()
			j.acc.serve(l)
		}
		if needsTLS(cfg) {
			l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: hostIP})
			if err != nil {
				return nil, fmt.Errorf("rank %d: direct TLS listener on %s: %w", cfg.Rank, cfg.Host, err)
			}
			self.TLS = l.Addr().String()
			j.acc.serveTLS(l, rt)
		}
		if needsUnix(cfg) {
			path := unixSocketPath(tag, cfg.Rank)
			l, err := listenUnix(path)
			if err != nil {
				return nil, fmt.Errorf("rank %d: unix listener: %w", cfg.Rank, err)
			}
			self.Unix = path
			j.acc.serve(l)
		}
		if needsStream(cfg) {
			h.SetStreamHandler(dataProto, j.acc.handleStream)
		}
	}

	var peers []peerInfo
	if cfg.Rank == 0 {
		// The rendezvous handler stays: a registration after the job formed gets an answer
		// saying so (a second process with a running rank's number), not a failed protocol
		// negotiation.
		peers, err = rs.serve(ctx, self)
	} else {
		addr0, aerr := tcpMultiaddr(rdv.IP, rdv.Port)
		if aerr != nil {
			return nil, fmt.Errorf("rank %d: rendezvous address %s: %w", cfg.Rank, cfg.Rendezvous, aerr)
		}
		peers, err = register(ctx, cfg, j.start, h, ids, addr0, self)
	}
	if err != nil {
		ts.set(peerTable{Error: fmt.Sprintf("rank %d, which passes the table on, did not get it: %v", cfg.Rank, err)})
		return nil, err
	}
	ts.set(peerTable{Peers: peers})
	if cfg.Rank != 0 && cfg.DataPath != DataPathStream {
		closeFormationConns(h)
	}
	for r, p := range peers {
		if r == cfg.Rank {
			continue
		}
		addrs := make([]ma.Multiaddr, 0, len(p.Addrs))
		for _, s := range p.Addrs {
			a, err := ma.NewMultiaddr(s)
			if err != nil {
				return nil, fmt.Errorf("rank %d: the peer table gives rank %d a bad address %q: %w", cfg.Rank, r, s, err)
			}
			addrs = append(addrs, a)
		}
		h.Peerstore().AddAddrs(ids[r], addrs, peerstore.PermanentAddrTTL)
	}

	local := proveAll(shm.DefaultDir, cfg.Rank, peers)
	if err := checkPairs(cfg, peers, local); err != nil {
		// The peers read this rank's proof file (and, from rank 0, the table) right after the
		// table: stay up a moment, so that each reports its own pairs, not this rank's exit.
		t := time.NewTimer(refusalGrace)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		return nil, err
	}
	d := &dialer{cfg: cfg, tag: tag, ids: ids, peers: peers, local: local, h: h, tls: rt}
	dialTimeout := cfg.JoinTimeout
	if dialTimeout == 0 {
		dialTimeout = DefaultJoinTimeout
	}
	conns, err := j.formLinks(ctx, d, dialTimeout, peers)
	if err != nil {
		return nil, withPeerStates(err, cfg.Rank, peers, local)
	}
	arena, err := j.formArena(ctx, conns, local, j.hb, hk)
	if err != nil {
		return nil, err
	}
	opts := cfg.Stream
	if reflect.ValueOf(opts).IsZero() {
		opts = transport.DefaultStreamOptions()
		// Every data path of a job is already protected or trusted: TLS authenticates and
		// integrity-checks the libp2p stream and the tls path, and the tcp and unix paths are
		// for trusted networks (token-authenticated). A payload CRC on top costs about a third of the
		// endpoint's CPU, so it is off unless Config.Stream asks for it. Headers are always
		// checksummed.
		opts.Checksum = false
	}
	if opts.Linger == 0 {
		// The ranks of a job close together; lingering lets each read the others' last frames.
		opts.Linger = DefaultLinger
	}
	acc := j.acc
	dial := func(ctx context.Context, peer int) (io.ReadWriteCloser, error) {
		c, err := acc.dialPeer(ctx, d, peer, dialTimeout)
		if err != nil {
			return nil, withPeerStates(err, cfg.Rank, peers, local)
		}
		return c, nil
	}
	var ep transport.Endpoint
	err = acc.own(func(conns []io.ReadWriteCloser) (func(int, io.ReadWriteCloser) error, error) {
		var err error
		if ep, err = transport.NewDialingStreamEndpoint(cfg.Rank, cfg.Size, conns, dial, opts); err != nil {
			return nil, err
		}
		return ep.(transport.Attacher).Attach, nil
	})
	if err != nil {
		if arena != nil {
			arena.Close()
		}
		return nil, fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	if arena != nil {
		arena.Watch()
	}
	pf, hb := j.proof, j.hb
	j.proof, j.hb, j.acc = nil, nil, nil // the endpoint owns them now
	if hb != nil {
		hb.watchProcs(peers, local)
		hb.start(ep.(transport.PeerFailer).FailPeer)
	}
	return &endpoint{Endpoint: ep, cfg: cfg, host: h, gater: gater, acc: acc, local: local, proof: pf, hb: hb, arena: arena}, nil
}

// withPeerStates adds to err what the kernel says of the peers of this host that cannot answer:
// a stopped process (SIGSTOP, a tracer) still has its sockets accept connections, so a join
// waiting on it ends in a bare "i/o timeout" at the join timeout without this.
func withPeerStates(err error, rank int, peers []peerInfo, local []locality) error {
	if rank >= len(peers) {
		return err
	}
	me := peers[rank].Proc
	var notes []string
	for r := range min(len(peers), len(local)) {
		if r == rank || !procstat.Watchable(me, peers[r].Proc, local[r].kernel) {
			continue
		}
		if st := peers[r].Proc.State(); st == procstat.StateStopped || st == procstat.StateGone {
			notes = append(notes, fmt.Sprintf("rank %d (pid %d on this host) is %v", r, peers[r].Proc.PID, st))
		}
	}
	if len(notes) == 0 {
		return err
	}
	return fmt.Errorf("%w; %s", err, strings.Join(notes, "; "))
}

// formLinks opens the links the job needs while it forms, and returns those of the arena
// exchange (arena.go), nil when the job skips it; every other link opens on first use.
//   - The arena exchange runs between rank 0 and every rank: rank 0 dials them all.
//   - The libp2p reference path ("stream") links every pair, as its data streams ride the
//     libp2p connections by peer ID: opened later, one could land on a second process that
//     holds a rank's key (a duplicate that rank 0 turns away) instead of the rank.
func (j *joiner) formLinks(ctx context.Context, d *dialer, timeout time.Duration, peers []peerInfo) ([]io.ReadWriteCloser, error) {
	cfg := j.cfg
	var dialTo, awaitFrom []int
	switch {
	case cfg.DataPath == DataPathStream:
		for r := range cfg.Size {
			if r > cfg.Rank {
				dialTo = append(dialTo, r)
			} else if r < cfg.Rank {
				awaitFrom = append(awaitFrom, r)
			}
		}
		_, err := j.connectPeers(ctx, d, timeout, dialTo, awaitFrom)
		return nil, err
	case !arenaExchanged(cfg, peers):
		return nil, nil
	case cfg.Rank == 0:
		for r := 1; r < cfg.Size; r++ {
			dialTo = append(dialTo, r)
		}
	default:
		awaitFrom = []int{0}
	}
	return j.connectPeers(ctx, d, timeout, dialTo, awaitFrom)
}

// connectPeers links this rank to the ranks dialTo, all at once, and waits for the links from
// the ranks awaitFrom, which dial this rank. It returns the links, indexed by peer.
func (j *joiner) connectPeers(ctx context.Context, d *dialer, timeout time.Duration, dialTo, awaitFrom []int) ([]io.ReadWriteCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(dialTo)+len(awaitFrom))
	var wg sync.WaitGroup
	for i, to := range dialTo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, errs[i] = j.acc.dialPeer(ctx, d, to, timeout); errs[i] != nil {
				cancel()
			}
		}()
	}
	for i, from := range awaitFrom {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[len(dialTo)+i] = j.acc.await(ctx, from); errs[len(dialTo)+i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	// The first cause, not the cancellations it brought on the others.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return j.acc.links(), nil
}

// closeFormationConns closes the libp2p connections this rank opened to join (to rank 0 and
// to the rank it fetched the table from), once it has the table: kept, they would leave rank 0
// with a connection from every rank. The heartbeats along the data links dial again (a
// heartbeat stream cut by this close is opened again); the connections that peers opened to
// this rank (its children fetching the table) are theirs to close. Not on the "stream" data
// path, whose data connections are streams on these very connections: there a peer may
// already be opening one on them.
func closeFormationConns(h host.Host) {
	for _, c := range h.Network().Conns() {
		if c.Stat().Direction == network.DirOutbound {
			_ = c.Close()
		}
	}
}

// boundTCP returns the TCP address the host actually listens on.
func boundTCP(h host.Host) (*net.TCPAddr, error) {
	for _, a := range h.Network().ListenAddresses() {
		na, err := manet.ToNetAddr(a)
		if err != nil {
			continue
		}
		if t, ok := na.(*net.TCPAddr); ok {
			return t, nil
		}
	}
	return nil, errors.New("the libp2p host has no TCP listen address")
}

// endpoint is the framed Endpoint plus the libp2p host under it.
type endpoint struct {
	transport.Endpoint
	cfg   Config
	host  host.Host
	gater *memberGater
	acc   *acceptor  // this rank's links (datapath_accept.go)
	local []locality // this rank's verdict on every rank's host
	proof *proofFile
	hb    *heartbeats // nil when off (heartbeat.go)
	arena *shm.Arena  // nil when the job has none (arena.go)
	act   transport.Activity
	once  sync.Once
	err   error
}

// SameHost is this rank's proven verdict on every rank (transport.HostLocality).
func (e *endpoint) SameHost() []bool {
	row := make([]bool, len(e.local))
	for r, l := range e.local {
		row[r] = l.same
	}
	return row
}

// checkPairs fails a job whose data path needs one host for a pair of ranks that did not prove
// one, for every pair this rank belongs to: each rank of the pair reports it at once instead of
// the listener waiting for a dial that never comes.
func checkPairs(cfg Config, peers []peerInfo, local []locality) error {
	for r := range peers {
		if r == cfg.Rank {
			continue
		}
		lo, hi := peers[min(r, cfg.Rank)], peers[max(r, cfg.Rank)]
		if _, err := pathFor(cfg, lo, hi, local[r]); err != nil {
			return fmt.Errorf("rank %d: %w", cfg.Rank, err)
		}
	}
	return nil
}

// Close closes the framed endpoint, every data connection and the libp2p host.
func (e *endpoint) Close() error {
	e.once.Do(func() {
		if e.arena != nil {
			// First, so that the other ranks' waits on this rank fail naming it at once.
			if err := e.arena.Close(); err != nil {
				e.err = fmt.Errorf("rank %d: %w", e.Rank(), err)
			}
		}
		// No new links from here on: listeners closed, hellos in progress settled.
		e.acc.stop(false)
		if e.hb != nil {
			e.hb.goodbye()
		}
		if err := e.Endpoint.Close(); err != nil && e.err == nil {
			e.err = err
		}
		if e.hb != nil {
			e.hb.close()
		}
		for _, c := range e.acc.links() {
			if c != nil {
				c.Close()
			}
		}
		if err := e.host.Close(); err != nil && e.err == nil {
			e.err = fmt.Errorf("rank %d: closing the libp2p host: %w", e.Rank(), err)
		}
		if e.hb != nil {
			e.hb.wait()
		}
		e.proof.remove()
	})
	return e.err
}
