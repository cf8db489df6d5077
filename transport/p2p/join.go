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
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// Join starts this rank's libp2p host, meets the other ranks through rank 0, opens one data
// connection per peer over the configured data path and returns the framed Endpoint over
// them. Endpoint.Close closes the libp2p host and every connection. Join gives up after
// cfg.JoinTimeout (or when ctx ends) with an error that names the ranks it was waiting for.
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
	mu    sync.Mutex
	conns []io.ReadWriteCloser // dialed by this rank
}

func (j *joiner) teardown() {
	if j.acc != nil {
		j.acc.stop(true)
	}
	j.mu.Lock()
	for i, c := range j.conns {
		if c != nil {
			c.Close()
			j.conns[i] = nil
		}
	}
	j.mu.Unlock()
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
	// Lower ranks dial higher ones, so rank 0 needs no data listener.
	if cfg.Rank > 0 {
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
	conns, err := j.connect(ctx, tag, ids, peers, local, rt)
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
	ep, err := transport.NewStreamEndpoint(cfg.Rank, cfg.Size, conns, opts)
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
	j.proof, j.hb = nil, nil // the endpoint owns them now
	if hb != nil {
		hb.watchProcs(peers, local)
		hb.start(ep.(transport.PeerFailer).FailPeer)
	}
	return &endpoint{Endpoint: ep, cfg: cfg, host: h, gater: gater, conns: conns, local: local, proof: pf, hb: hb, arena: arena}, nil
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

// connect dials every higher rank and waits for every lower one, all at once.
func (j *joiner) connect(ctx context.Context, tag jobTag, ids []peer.ID, peers []peerInfo, local []locality, rt *rankTLS) ([]io.ReadWriteCloser, error) {
	cfg := j.cfg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	j.conns = make([]io.ReadWriteCloser, cfg.Size)
	d := &dialer{cfg: cfg, tag: tag, ids: ids, peers: peers, local: local, h: j.h, tls: rt}
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	setErr := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		errMu.Unlock()
	}
	for to := cfg.Rank + 1; to < cfg.Size; to++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.dial(ctx, to)
			if err != nil {
				setErr(err)
				return
			}
			j.mu.Lock()
			j.conns[to] = c
			j.mu.Unlock()
		}()
	}
	if err := j.acc.wait(ctx); err != nil {
		setErr(err)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	j.acc.stop(false)
	conns := make([]io.ReadWriteCloser, cfg.Size)
	copy(conns, j.acc.conns)
	for to := cfg.Rank + 1; to < cfg.Size; to++ {
		conns[to] = j.conns[to]
	}
	return conns, nil
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
	conns []io.ReadWriteCloser
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
		if e.hb != nil {
			e.hb.goodbye()
		}
		if err := e.Endpoint.Close(); err != nil && e.err == nil {
			e.err = err
		}
		if e.hb != nil {
			e.hb.close()
		}
		for _, c := range e.conns {
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
