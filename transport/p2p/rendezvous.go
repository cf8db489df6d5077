package p2p

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hetsync/hetsync/internal/procstat"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/sec"
	ma "github.com/multiformats/go-multiaddr"
)

// rendezvousProto is the protocol each rank speaks to rank 0 to register and get the table.
const rendezvousProto = protocol.ID("/hetsync/rendezvous/1")

// maxControlMsg bounds a rendezvous message; a table of thousands of ranks fits.
const maxControlMsg = 16 << 20

// peerInfo is what a rank registers with rank 0 and what the table holds for each rank.
type peerInfo struct {
	Rank      int      `json:"rank"`
	Size      int      `json:"size"`
	LocalRank int      `json:"local_rank"`
	Hostname  string   `json:"hostname"`
	Addrs     []string `json:"addrs"`          // libp2p multiaddrs
	TCP       string   `json:"tcp,omitempty"`  // direct TCP listener host:port
	TLS       string   `json:"tls,omitempty"`  // direct TLS-over-TCP listener host:port
	Unix      string   `json:"unix,omitempty"` // direct Unix socket path
	Token     []byte   `json:"token"`          // authenticates direct-path hellos to this rank
	Security  string   `json:"security"`
	DataPath  string   `json:"data_path"`

	// HostOverride is Config.Hostname (HETSYNC_HOSTNAME), empty when not set: ranks that set
	// different ones never share a host. Hostname above is os.Hostname(), for messages.
	HostOverride string      `json:"host_override,omitempty"`
	Proof        hostProof   `json:"host_proof"` // see hostproof.go
	Proc         procstat.ID `json:"proc"`       // see procwatch.go
}

// peerTable is rank 0's answer: every rank's info, or why the job cannot start, or (Parent)
// the rank to fetch the table from (tabletree.go).
type peerTable struct {
	Error  string     `json:"error,omitempty"`
	Peers  []peerInfo `json:"peers,omitempty"`
	Parent *peerInfo  `json:"parent,omitempty"`
}

func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	copy(msg[4:], b)
	_, err = w.Write(msg)
	return err
}

func readMsg(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxControlMsg {
		return fmt.Errorf("control message of %d bytes exceeds the limit of %d", size, maxControlMsg)
	}
	// The buffer grows with what arrives: a length prefix alone cannot claim the limit.
	b, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err != nil {
		return err
	}
	if len(b) < int(size) {
		return fmt.Errorf("control message of %d bytes ends after %d: %w", size, len(b), io.ErrUnexpectedEOF)
	}
	return json.Unmarshal(b, v)
}

// registration is one registration received by rank 0, already checked by its handler.
type registration struct {
	info   peerInfo
	stream network.Stream
	err    error // set when the registration is invalid for the job: fatal for the job
}

// rendezvousServer is rank 0's side of the rendezvous.
type rendezvousServer struct {
	cfg  Config
	ids  []peer.ID
	regs chan registration
	done chan struct{} // closed when serve returns: handlers stop delivering
	// formed is set when serve sent the table: a registration after that comes from a process
	// that claims the rank of a running one.
	formed atomic.Bool

	registered       func(rank int) // test hook, may be nil
	progressInterval time.Duration  // test hook: joinProgressEvery when 0
	// answered, a test hook, learns whether rank 0 sent rank the table itself (full) or a
	// pointer to its parent.
	answered func(rank int, full bool)
}

func newRendezvousServer(cfg Config, ids []peer.ID) *rendezvousServer {
	return &rendezvousServer{cfg: cfg, ids: ids, regs: make(chan registration), done: make(chan struct{})}
}

// handle runs for every rendezvous stream opened to rank 0. The gater has already admitted the
// remote peer, so it is one of the job's ranks (authenticated when Security is tls).
func (rs *rendezvousServer) handle(s network.Stream) {
	remote := s.Conn().RemotePeer()
	from := s.Conn().RemoteMultiaddr()
	_ = s.SetReadDeadline(time.Now().Add(rs.cfg.JoinTimeout))
	var info peerInfo
	if err := readMsg(s, &info); err != nil {
		rs.cfg.Logger.Warn("hetsync rendezvous: unreadable registration", "rank", 0, "from", from.String(), "err", err)
		_ = s.Reset()
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	reg := registration{info: info, stream: s, err: rs.check(info, remote)}
	select {
	case rs.regs <- reg:
	case <-rs.done:
		msg := "rank 0 is no longer accepting registrations"
		if rs.formed.Load() {
			msg = fmt.Sprintf("the job has already formed: all %d ranks joined, rank %d among them, and it is running (is this process a second rank %d, or a rank of a job that was restarted?)",
				rs.cfg.Size, info.Rank, info.Rank)
		}
		_ = writeMsg(s, peerTable{Error: msg})
		_ = s.Close()
	}
}

// check validates a registration against rank 0's view of the job.
func (rs *rendezvousServer) check(info peerInfo, remote peer.ID) error {
	c := rs.cfg
	switch {
	case info.Rank <= 0 || info.Rank >= c.Size:
		return fmt.Errorf("rank %d registered, but the job has ranks [1, %d) to register", info.Rank, c.Size)
	case info.Size != c.Size:
		return fmt.Errorf("rank %d has Size %d, rank 0 has %d", info.Rank, info.Size, c.Size)
	case remote != rs.ids[info.Rank]:
		return fmt.Errorf("a registration for rank %d came from the peer of rank %d", info.Rank, rankOf(rs.ids, remote))
	case info.Security != c.Security:
		return fmt.Errorf("rank %d has Security %q, rank 0 has %q", info.Rank, info.Security, c.Security)
	case info.DataPath != c.DataPath:
		return fmt.Errorf("rank %d has DataPath %q, rank 0 has %q", info.Rank, info.DataPath, c.DataPath)
	case len(info.Token) != tokenLen:
		return fmt.Errorf("rank %d sent a token of %d bytes, want %d", info.Rank, len(info.Token), tokenLen)
	}
	return nil
}

func rankOf(ids []peer.ID, p peer.ID) int {
	for r, id := range ids {
		if id == p {
			return r
		}
	}
	return -1
}

// serve waits for every rank to register and sends each the table. On any failure every
// registered rank is told why, so no rank is left waiting.
func (rs *rendezvousServer) serve(ctx context.Context, self peerInfo) ([]peerInfo, error) {
	defer close(rs.done)
	size := rs.cfg.Size
	peers := make([]peerInfo, size)
	streams := make([]network.Stream, size)
	peers[0] = self
	have := 1
	fail := func(err error) ([]peerInfo, error) {
		var refused []network.Stream
		for _, s := range streams {
			if s != nil {
				refused = append(refused, s)
			}
		}
		tellAndWait(refused, err.Error())
		return nil, err
	}
	progress := time.NewTicker(rs.progressEvery())
	defer progress.Stop()
	for have < size {
		select {
		case <-progress.C:
			rs.logProgress(have, streams)
		case reg := <-rs.regs:
			r := reg.info.Rank
			if reg.err != nil {
				streams[0] = reg.stream // stream 0 is unused otherwise: tell this rank too
				return fail(fmt.Errorf("rank 0: rendezvous at %s: %w", rs.cfg.Rendezvous, reg.err))
			}
			if streams[r] != nil {
				err := fmt.Errorf("rank 0: rendezvous at %s: rank %d registered twice (hostnames %q and %q, from %s and %s)",
					rs.cfg.Rendezvous, r, peers[r].Hostname, reg.info.Hostname,
					streams[r].Conn().RemoteMultiaddr(), reg.stream.Conn().RemoteMultiaddr())
				tellAndWait([]network.Stream{reg.stream}, err.Error())
				return fail(err)
			}
			peers[r], streams[r] = reg.info, reg.stream
			have++
			if rs.registered != nil {
				rs.registered(r)
			}
		case <-ctx.Done():
			return fail(fmt.Errorf("rank 0: rendezvous at %s: %d of %d ranks joined; still missing rank(s) %s: %w",
				rs.cfg.Rendezvous, have, size, missingRanks(streams, size), ctx.Err()))
		}
	}
	// The table goes to rank 0's children in the tree; every other rank gets its parent's
	// entry and fetches the table from it (tabletree.go).
	table := peerTable{Peers: peers}
	var firstErr error
	for r := 1; r < size; r++ {
		msg := table
		if p := tableParent(r); p != 0 {
			msg = peerTable{Parent: &peers[p]}
		}
		if rs.answered != nil {
			rs.answered(r, msg.Parent == nil)
		}
		if err := writeMsg(streams[r], msg); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("rank 0: sending the peer table to rank %d: %w", r, err)
		}
		_ = streams[r].Close()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	rs.formed.Store(true)
	return peers, nil
}

// joinProgressEvery is how often rank 0 logs how many ranks have joined while it waits.
const joinProgressEvery = 5 * time.Second

func (rs *rendezvousServer) progressEvery() time.Duration {
	if rs.progressInterval > 0 {
		return rs.progressInterval
	}
	return joinProgressEvery
}

// logProgress logs, while ranks are still joining, how many have and which are missing.
func (rs *rendezvousServer) logProgress(have int, streams []network.Stream) {
	rs.cfg.Logger.Info(fmt.Sprintf("hetsync rendezvous: rank 0: %d of %d ranks joined; waiting for rank(s) %s",
		have, rs.cfg.Size, missingRanks(streams, rs.cfg.Size)), "rank", 0, "joined", have, "size", rs.cfg.Size)
}

// missingRanks lists the ranks that have not registered, the first 32 of them when there are
// more (a message of thousands of numbers says nothing).
func missingRanks(streams []network.Stream, size int) string {
	var missing []string
	n := 0
	for r := 1; r < size; r++ {
		if streams[r] == nil {
			if n++; n <= 32 {
				missing = append(missing, fmt.Sprint(r))
			}
		}
	}
	if n > 32 {
		missing = append(missing, fmt.Sprintf("and %d more", n-32))
	}
	return strings.Join(missing, ", ")
}

// tellAndWait sends every stream an error table and waits (briefly) until each peer has read
// it and closed its side, so that rank 0 exiting right after cannot cut the message off.
func tellAndWait(streams []network.Stream, msg string) {
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.SetDeadline(time.Now().Add(2 * time.Second))
			if writeMsg(s, peerTable{Error: msg}) == nil && s.CloseWrite() == nil {
				_, _ = io.Copy(io.Discard, s)
			}
			_ = s.Close()
		}()
	}
	wg.Wait()
}

// ErrWrongJob is wrapped by the error of a rank whose secret does not match rank 0's: the peer
// at the rendezvous address does not have the identity this rank derives for rank 0.
var ErrWrongJob = errors.New("peer identity does not match the job (wrong HETSYNC_JOB_SECRET?)")

func isIdentityMismatch(err error) bool {
	var m sec.ErrPeerIDMismatch
	if errors.As(err, &m) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "peer id mismatch") || strings.Contains(s, "unexpected peer ID")
}

// isRetryableDial says whether dialing rank 0 may succeed later: rank 0 may not be listening yet.
func isRetryableDial(err error) bool {
	// Not ECONNRESET or EPIPE: those come from a rank 0 that is up and refuses this rank.
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isReset says whether err is a connection reset by rank 0 (during the dial or the security
// handshake).
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "connection reset by peer")
}

// register is the side of every rank but 0: dial rank 0 (retrying while it is not up yet),
// register, and wait for the table.
func register(ctx context.Context, cfg Config, start time.Time, h host.Host, ids []peer.ID, addr0 ma.Multiaddr, self peerInfo) ([]peerInfo, error) {
	rank0 := ids[0]
	where := fmt.Sprintf("rank %d: cannot join rank 0 at %s", cfg.Rank, cfg.Rendezvous)
	ai := peer.AddrInfo{ID: rank0, Addrs: []ma.Multiaddr{addr0}}
	backoff := 20 * time.Millisecond
	streamTries, resetTries := 0, 0
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			if lastErr == nil {
				lastErr = err
			}
			return nil, fmt.Errorf("%s: %s: %w", where, gaveUp(ctx, start, cfg.JoinTimeout), lastErr)
		}
		err := h.Connect(network.WithForceDirectDial(ctx, "hetsync rendezvous"), ai)
		if err != nil && ctx.Err() != nil {
			// Cut off by ctx, not refused: the top of the loop says why this rank stopped.
			lastErr = err
			continue
		}
		if err == nil {
			var s network.Stream
			s, err = h.NewStream(ctx, rank0, rendezvousProto)
			if err == nil {
				return exchange(ctx, cfg, h, ids, s, where, self)
			}
			if ctx.Err() != nil {
				lastErr = err
				continue
			}
			// Rank 0 registers its handler right after it starts listening; a few retries
			// cover that window. A persistent failure is a refusal.
			if streamTries++; streamTries >= 5 {
				return nil, fmt.Errorf("%s: %w (does rank 0 run the same job with the same size?)", where, err)
			}
		} else {
			if isIdentityMismatch(err) {
				return nil, fmt.Errorf("%s: %w", where, ErrWrongJob)
			}
			// A reset is how rank 0 refuses this rank, and also how a loaded rank 0 drops a
			// handshake it could not finish in its accept timeout: a few retries tell them apart.
			retry := isRetryableDial(err) || (isReset(err) && resetTries < 4)
			if isReset(err) {
				resetTries++
			}
			if !retry {
				return nil, fmt.Errorf("%s: %w (does rank 0 run the same job with the same size?)", where, err)
			}
		}
		lastErr = err
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// gaveUp says why and after how long a rank stopped waiting for rank 0: its join timeout, or
// ctx ended sooner (the launcher stopped the job because rank 0 failed, Ctrl-C, the caller's
// deadline). Only the first is "gave up after the join timeout"; start is when Join began.
func gaveUp(ctx context.Context, start time.Time, timeout time.Duration) string {
	waited := time.Since(start)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && waited >= timeout {
		return fmt.Sprintf("gave up after %v (the join timeout, HETSYNC_JOIN_TIMEOUT)", timeout)
	}
	return fmt.Sprintf("stopped after %v of a %v join timeout, before rank 0 answered (%v)",
		waited.Round(time.Millisecond), timeout, context.Cause(ctx))
}

func exchange(ctx context.Context, cfg Config, h host.Host, ids []peer.ID, s network.Stream, where string, self peerInfo) ([]peerInfo, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	if err := writeMsg(s, self); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("%s: sending the registration: %w", where, err)
	}
	var table peerTable
	if err := readMsg(s, &table); err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (rank 0 did not send the peer table in time; are all %d ranks started?)", ctx.Err(), cfg.Size)
		} else if isIdentityMismatch(err) {
			err = ErrWrongJob
		}
		return nil, fmt.Errorf("%s: waiting for the peer table: %w", where, err)
	}
	_ = s.Close()
	if table.Parent != nil && table.Error == "" {
		return fetchTable(ctx, cfg, h, ids, *table.Parent, where)
	}
	if err := checkTable(cfg, table); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return table.Peers, nil
}

// checkTable validates rank 0's answer: a refusal, or one entry per rank, in rank order.
func checkTable(cfg Config, table peerTable) error {
	if table.Error != "" {
		return fmt.Errorf("rank 0 refused: %s", table.Error)
	}
	if len(table.Peers) != cfg.Size {
		return fmt.Errorf("the peer table has %d ranks, want %d", len(table.Peers), cfg.Size)
	}
	for r, p := range table.Peers {
		if p.Rank != r || len(p.Token) != tokenLen {
			return fmt.Errorf("the peer table is malformed at rank %d", r)
		}
	}
	return nil
}

// sortedRanks formats a list of ranks for messages.
func sortedRanks(rs []int) string {
	sort.Ints(rs)
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ", ")
}
