package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/hetsync/hetsync/internal/procstat"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/hetsync/hetsync/transport"
)

// heartbeatProto carries the heartbeats: one stream from a rank to every peer it watches, on
// the libp2p connections (the control path), apart from the data connections, so that a peer
// busy moving a large message is not taken for a silent one, and a frozen peer is seen even by
// a rank that has nothing to receive from it now. A rank watches, from the end of its join, a
// fixed set of peers that keeps every rank watched (livenessPeers: every rank in a job of up to
// allPairsMax ranks, else its hypercube and ring neighbours, O(log p)), and every peer it links
// to later. A rank that fails a peer tells the peers it watches in its next heartbeat, which
// they send on at once: the news crosses the job in O(log p) hops, so that a rank that waits
// on the failed rank through others, or that must first connect to it, is told within about
// the peer timeout instead of waiting for a message, or a dial's answer, that cannot come.
const heartbeatProto = protocol.ID("/hetsync/heartbeat/1")

// allPairsMax is the largest job whose ranks all watch one another: p-1 heartbeat streams a
// rank is cheap at that size, and a failure is then seen first-hand by every rank.
const allPairsMax = 16

// livenessPeers are the peers rank watches from the end of its join, whatever it links to: all
// of them in a job of up to allPairsMax ranks, else rank XOR 2^k for every k (those below
// size) and the ring neighbours rank±1. The set is symmetric (each of a pair watches the
// other), and connected with a diameter of at most 2·log2 p hops (clearing one bit at a time
// leads every rank to rank 0), so news of a failure reaches every rank.
func livenessPeers(rank, size int) []int {
	var out []int
	if size <= allPairsMax {
		for r := range size {
			if r != rank {
				out = append(out, r)
			}
		}
		return out
	}
	seen := map[int]bool{rank: true}
	add := func(r int) {
		if r >= 0 && r < size && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for bit := 1; bit < size; bit <<= 1 {
		add(rank ^ bit)
	}
	add((rank + 1) % size)
	add((rank - 1 + size) % size)
	return out
}

// DefaultPeerTimeout is how long a peer may send no heartbeat before it is failed, when
// Config.PeerTimeout is 0. Heartbeats go out every PeerTimeout/8 (at most every second), so
// that a few lost to a loaded host do not fail a live peer, and a frozen one is failed on
// every rank within PeerTimeout and a check interval (under 10 s).
const DefaultPeerTimeout = 8 * time.Second

// A heartbeat is 48 bytes, integers big-endian:
//
//	off size field
//	  0    4 magic "HBT1"
//	  4    1 flags: bit 0 goodbye (the sender is closing its endpoint), bit 1 its call is done,
//	             bit 2 the rank named at offset 6 exited (else it fell silent)
//	  5    1 the sender's Activity op code
//	  6    2 news: 1 + a rank the sender knows to have failed, 0 for none (ranks from 65535 on
//	             are not told: their watchers fail them first-hand only)
//	  8    8 the sender's Activity sequence number
//	 16    8 age of that activity, ns
//	 24    8 send time, ns on the sender's clock since its heartbeats started
//	 32    8 echo: the send time of the last heartbeat the sender got from the receiver
//	 40    8 hold: ns between the sender getting that heartbeat and sending this one
//
// Echo and hold give the receiver the round trip of the control path without synchronized
// clocks (its send time, echoed, against its own clock, less the time the peer held it).
const (
	heartbeatLen        = 48
	heartbeatMagic      = "HBT1"
	beatGoodbye    byte = 1
	beatDone       byte = 2
	beatNewsExited byte = 4
	// newsMax is the highest rank a heartbeat's news can name.
	newsMax = 0xFFFE
)

// heartbeats is one rank's side of the liveness protocol: a sender per peer, a reader per
// incoming stream, and a monitor that fails a peer silent for longer than the timeout.
type heartbeats struct {
	rank, size        int
	interval, timeout time.Duration
	// firstGrace bounds the wait for a peer's first heartbeat: the join timeout, since a large
	// job on a loaded host takes a while to open its streams (one libp2p connection per pair),
	// while a peer that stopped after that is failed after timeout.
	firstGrace time.Duration
	h          host.Host
	ids        []peer.ID
	log        *slog.Logger
	epoch      time.Time
	act        transport.Activity

	mu    sync.Mutex
	peers []beatPeer
	// procs are the processes of the peers on this rank's kernel (the zero procstat.ID for the
	// others), set once the peer table is known (procwatch.go).
	procs []procstat.ID
	// netApart marks the watched peers in another network namespace: their silence, while
	// their process runs, is a network that is down (procwatch.go).
	netApart []bool
	fail     func(peer int, err error) // set by start; nil while joining
	// news is every rank this rank knows to have failed (its own verdicts and those it was
	// told), in the order learned: its heartbeats carry them, one a beat, round the list.
	news []failNews
	// newsCh is closed, and replaced, when news grows: the senders beat at once.
	newsCh  chan struct{}
	stopped bool
	// checked is when the monitor last finished judging every peer: a peer whose silence,
	// as the monitor counts it, exceeded its limit before then and that is not failed was
	// spared on purpose (it said goodbye, or its process runs), which the tests check.
	checked time.Time

	stop     chan struct{} // closed: the senders say goodbye and end
	stopOnce sync.Once
	quit     chan struct{} // closed: the monitor ends
	cancel   context.CancelFunc
	ctx      context.Context
	senders  sync.WaitGroup
	wg       sync.WaitGroup // the monitor
	readers  sync.WaitGroup
}

// failNews is a failed rank as heartbeats tell it.
type failNews struct {
	rank   int
	exited bool
}

type beatPeer struct {
	transport.PeerState
	heard bool // a heartbeat has arrived on the peer's current stream
	// watched: the peer is one of livenessPeers, or this rank holds a data connection to it,
	// so it beats to it and judges its silence; since is when that began.
	watched bool
	since   time.Time
	// starved is how long this rank itself was not scheduled since the peer's last heartbeat
	// (its monitor's ticks came late): silence this rank could not have heard through.
	starved time.Duration
	echo    uint64    // the peer's last send time
	echoAt  time.Time // when it arrived
}

// newHeartbeats prepares the protocol for cfg; it sends nothing until start. With a negative
// PeerTimeout it stays off (nil).
func newHeartbeats(cfg Config, h host.Host, ids []peer.ID) *heartbeats {
	timeout := cfg.PeerTimeout
	if timeout < 0 {
		return nil
	}
	if timeout == 0 {
		timeout = DefaultPeerTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	hb := &heartbeats{rank: cfg.Rank, size: cfg.Size, timeout: timeout,
		interval: min(time.Second, max(timeout/8, 10*time.Millisecond)), firstGrace: max(timeout, cfg.JoinTimeout),
		h: h, ids: ids, log: cfg.Logger, epoch: time.Now(),
		peers: make([]beatPeer, cfg.Size), newsCh: make(chan struct{}), stop: make(chan struct{}), quit: make(chan struct{}), ctx: ctx, cancel: cancel}
	h.SetStreamHandler(heartbeatProto, hb.handle)
	return hb
}

// start begins sending and monitoring once the job is formed; fail is called once for a peer
// found frozen or dead.
func (hb *heartbeats) start(fail func(peer int, err error)) {
	for _, r := range livenessPeers(hb.rank, hb.size) {
		hb.watch(r)
	}
	now := time.Now()
	hb.mu.Lock()
	hb.fail = fail
	var failed, watched []int
	for r := range hb.peers {
		p := &hb.peers[r]
		if !p.watched {
			continue
		}
		watched = append(watched, r)
		// Silence is counted from now: peers start sending as their own join ends.
		p.since = now
		if p.Heard.IsZero() {
			p.Heard = now
		}
		if p.Failed != nil {
			failed = append(failed, r)
		}
	}
	hb.senders.Add(len(watched))
	hb.mu.Unlock()
	for _, r := range failed {
		fail(r, hb.Peer(r).Failed)
	}
	for _, r := range watched {
		go hb.send(r)
	}
	hb.wg.Add(1)
	go hb.monitor()
}

// watch begins the heartbeats with peer r, one of livenessPeers or a peer this rank now holds
// a data connection to: at start if the job is still forming, else at once.
func (hb *heartbeats) watch(r int) {
	if r < 0 || r >= hb.size || r == hb.rank {
		return
	}
	now := time.Now()
	hb.mu.Lock()
	p := &hb.peers[r]
	if p.watched {
		hb.mu.Unlock()
		return
	}
	p.watched, p.since = true, now
	if !p.heard {
		// Silence is counted from the link: before it, the peer had no reason to beat.
		p.Heard = now
	}
	run := hb.fail != nil && !hb.stopped && !isClosedChan(hb.stop)
	if run {
		hb.senders.Add(1)
	}
	hb.mu.Unlock()
	if run {
		go hb.send(r)
	}
}

// isClosedChan says whether ch, a channel that is only ever closed, is.
func isClosedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// goodbye stops the senders, each writing a goodbye first. The monitor keeps watching, so
// that a peer frozen while this rank closes is still failed and its connection closed: the
// endpoint's Close lingers for its peers' last frames and would wait on a frozen one.
func (hb *heartbeats) goodbye() {
	hb.stopOnce.Do(func() {
		// Under mu, so that watch never adds a sender once the senders are awaited.
		hb.mu.Lock()
		close(hb.stop)
		hb.mu.Unlock()
	})
	hb.senders.Wait()
}

// close says goodbye if that is not done yet and stops the monitor; the readers end when the
// host closes (wait).
func (hb *heartbeats) close() {
	hb.goodbye()
	hb.mu.Lock()
	if hb.stopped {
		hb.mu.Unlock()
		return
	}
	hb.stopped = true
	hb.mu.Unlock()
	close(hb.quit)
	hb.wg.Wait()
	hb.cancel()
	hb.h.RemoveStreamHandler(heartbeatProto)
}

// wait waits for the readers, after the host has closed.
func (hb *heartbeats) wait() { hb.readers.Wait() }

func (hb *heartbeats) isStopped() bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.stopped
}

// Peer is what this rank knows of rank r.
func (hb *heartbeats) Peer(r int) transport.PeerState {
	if r < 0 || r >= hb.size {
		return transport.PeerState{}
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.peers[r].PeerState
}

// send keeps one stream to peer r and writes a heartbeat on it every interval; on stop it
// writes a goodbye.
func (hb *heartbeats) send(r int) {
	defer hb.senders.Done()
	var s network.Stream
	t := time.NewTicker(hb.interval)
	defer t.Stop()
	var b [heartbeatLen]byte
	turn := 0 // which of the news this beat tells
	for {
		stopping := false
		select {
		case <-hb.stop:
			stopping = true
		default:
		}
		// A rank that closes before its stream to a lower rank opened (a short job: that
		// stream waits for the lower rank's first) dials it now to say goodbye, for one
		// interval at most: without it the peer would take the closed rank for one that
		// exited without closing.
		if s == nil && (stopping || hb.mayDial(r)) {
			limit := hb.timeout
			if stopping {
				limit = hb.interval
			}
			ctx, cancel := context.WithTimeout(hb.ctx, limit)
			ns, err := hb.h.NewStream(network.WithAllowLimitedConn(ctx, "heartbeat"), hb.ids[r], heartbeatProto)
			cancel()
			if err == nil {
				s = ns
			} else if !hb.isStopped() {
				hb.log.Debug("hetsync heartbeat: cannot open a stream", "rank", hb.rank, "peer", r, "err", err)
			}
		}
		if s != nil {
			hb.encode(b[:], r, stopping, turn)
			turn++
			_ = s.SetWriteDeadline(time.Now().Add(hb.timeout))
			if _, err := s.Write(b[:]); err != nil {
				_ = s.Reset()
				s = nil
			} else if stopping {
				hb.flushGoodbye(s)
			}
		}
		if stopping {
			return
		}
		hb.mu.Lock()
		news := hb.newsCh
		hb.mu.Unlock()
		select {
		case <-hb.stop:
		case <-t.C:
		case <-news:
			// A failure learned: tell it now, with the news first, not a tick later.
			turn = hb.newestNews()
		}
	}
}

// newestNews is the index of the last failure learned.
func (hb *heartbeats) newestNews() int {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return max(len(hb.news)-1, 0)
}

// flushGoodbye closes the stream once the peer has read the goodbye written on it: the
// peer's reader ends its side when it reads the end of the stream, which comes after the
// goodbye. Closing alone returns while the goodbye may still sit in the connection's
// buffers, and a process that exits right after Close would take it along. The wait is
// bounded by one heartbeat interval, so a frozen peer delays Close by no more than that.
func (hb *heartbeats) flushGoodbye(s network.Stream) {
	if err := s.CloseWrite(); err == nil {
		_ = s.SetReadDeadline(time.Now().Add(hb.interval))
		_, _ = io.Copy(io.Discard, s)
	}
	_ = s.Close()
}

// mayDial says whether this rank may open its stream to peer r now. A higher rank waits
// for the lower one's stream first (for half the timeout at most), so that the pair shares
// the libp2p connection that stream opened instead of both dialing one at the same moment.
func (hb *heartbeats) mayDial(r int) bool {
	if r > hb.rank {
		return true
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.peers[r].heard || time.Since(hb.peers[r].since) > hb.timeout/2
}

// encode fills b with this rank's heartbeat to peer r, telling the failure news[turn] (round
// the list) if there is any.
func (hb *heartbeats) encode(b []byte, r int, goodbye bool, turn int) {
	now := time.Now()
	seq, op, done, since := hb.act.Load()
	copy(b, heartbeatMagic)
	b[4] = 0
	if goodbye {
		b[4] |= beatGoodbye
	}
	if done {
		b[4] |= beatDone
	}
	b[5] = op
	binary.BigEndian.PutUint64(b[8:], seq)
	var age time.Duration
	if !since.IsZero() {
		age = max(0, now.Sub(since))
	}
	binary.BigEndian.PutUint64(b[16:], uint64(age))
	binary.BigEndian.PutUint64(b[24:], uint64(now.Sub(hb.epoch)))
	hb.mu.Lock()
	p := hb.peers[r]
	var news failNews
	told := len(hb.news) > 0
	if told {
		news = hb.news[turn%len(hb.news)]
	}
	hb.mu.Unlock()
	binary.BigEndian.PutUint16(b[6:], 0)
	if told && news.rank <= newsMax {
		binary.BigEndian.PutUint16(b[6:], uint16(news.rank+1))
		if news.exited {
			b[4] |= beatNewsExited
		}
	}
	var hold time.Duration
	if p.echo != 0 {
		hold = now.Sub(p.echoAt)
	}
	binary.BigEndian.PutUint64(b[32:], p.echo)
	binary.BigEndian.PutUint64(b[40:], uint64(hold))
}

// handle reads the heartbeats of one peer. A stream that ends without a goodbye is not taken
// for a death: libp2p resets the streams of a connection it drops (two ranks that dialed each
// other at once, a rank closing the connections it joined on), and the peer opens another. A
// peer that died closes its data connection too, which fails it at once; one whose streams
// keep failing falls silent. The peer is given the first-heartbeat grace again meanwhile,
// since a loaded host may take that long to dial, unless the kernel says its process is
// stopped (monitor). The streams open at the end of the join (livenessPeers), so these
// windows fall while the job starts, not in the middle of its collectives.
func (hb *heartbeats) handle(s network.Stream) {
	r := rankOf(hb.ids, s.Conn().RemotePeer())
	hb.mu.Lock()
	if r < 0 || r == hb.rank || hb.stopped {
		hb.mu.Unlock()
		_ = s.Reset()
		return
	}
	hb.readers.Add(1)
	hb.mu.Unlock()
	defer hb.readers.Done()
	var b [heartbeatLen]byte
	for {
		_ = s.SetReadDeadline(time.Time{})
		if _, err := io.ReadFull(s, b[:]); err != nil {
			_ = s.Reset()
			hb.mu.Lock()
			left := hb.peers[r].Left
			hb.peers[r].heard = false
			hb.mu.Unlock()
			if !left && !hb.isStopped() {
				hb.log.Debug("hetsync heartbeat: stream ended without a goodbye", "rank", hb.rank, "peer", r, "err", err)
			}
			return
		}
		if string(b[:4]) != heartbeatMagic {
			_ = s.Reset()
			hb.log.Warn("hetsync heartbeat: garbled heartbeat, stream closed", "rank", hb.rank, "peer", r)
			return
		}
		if news, ok := hb.received(r, b[:]); ok {
			hb.died(news.rank, &transport.PeerReportedError{Rank: hb.rank, Peer: news.rank, By: r, Exited: news.exited})
		}
	}
}

// received records heartbeat b from peer r, and returns the failure it tells of, if it is news
// to this rank (not this rank, not a rank already failed or gone with a goodbye).
func (hb *heartbeats) received(r int, b []byte) (news failNews, ok bool) {
	now := time.Now()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	p := &hb.peers[r]
	p.Heard, p.heard, p.starved = now, true, 0
	p.Left = p.Left || b[4]&beatGoodbye != 0
	p.Done = b[4]&beatDone != 0
	p.Op = b[5]
	p.Seq = binary.BigEndian.Uint64(b[8:])
	p.At = now.Add(-time.Duration(binary.BigEndian.Uint64(b[16:])))
	p.echo, p.echoAt = binary.BigEndian.Uint64(b[24:]), now
	if echo := binary.BigEndian.Uint64(b[32:]); echo != 0 {
		rtt := now.Sub(hb.epoch) - time.Duration(echo) - time.Duration(binary.BigEndian.Uint64(b[40:]))
		p.RTT = max(rtt, 0)
	}
	n := int(binary.BigEndian.Uint16(b[6:])) - 1
	if n < 0 || n >= hb.size || n == hb.rank || hb.peers[n].Failed != nil || hb.peers[n].Left {
		return failNews{}, false
	}
	return failNews{rank: n, exited: b[4]&beatNewsExited != 0}, true
}

// died fails peer r with err, once, unless it said goodbye or this rank is closing, and makes
// it news that this rank's heartbeats tell its watched peers.
func (hb *heartbeats) died(r int, err error) {
	hb.mu.Lock()
	p := &hb.peers[r]
	if hb.stopped || p.Left || p.Failed != nil {
		hb.mu.Unlock()
		return
	}
	p.Failed = err
	var exited *transport.PeerExitedError
	var told *transport.PeerReportedError
	hb.news = append(hb.news, failNews{rank: r, exited: errors.As(err, &exited) || (errors.As(err, &told) && told.Exited)})
	close(hb.newsCh)
	hb.newsCh = make(chan struct{})
	fail := hb.fail
	hb.mu.Unlock()
	if fail == nil {
		// Still joining: the join reports its own failure; start fails the peer if it succeeds.
		return
	}
	hb.log.Error("hetsync: peer failed", "rank", hb.rank, "peer", r, "err", err)
	fail(r, err)
}

// monitor fails every peer silent for longer than the timeout, and a peer of this kernel
// whose process is gone as soon as it has missed two heartbeats.
func (hb *heartbeats) monitor() {
	defer hb.wg.Done()
	t := time.NewTicker(hb.interval)
	defer t.Stop()
	last := time.Now()
	overloaded := make([]bool, hb.size) // a live peer's silence was logged
	for {
		select {
		case <-hb.quit:
			return
		case <-t.C:
		}
		now := time.Now()
		late := now.Sub(last) - 2*hb.interval
		last = now
		for r := range hb.size {
			if r == hb.rank {
				continue
			}
			hb.mu.Lock()
			bp := &hb.peers[r]
			if !bp.watched {
				hb.mu.Unlock()
				continue
			}
			if late > 0 {
				bp.starved += late
			}
			p, limit, limitFrom, starved := bp.PeerState, hb.timeout, "", bp.starved
			if !bp.heard && hb.firstGrace > hb.timeout {
				limit, limitFrom = hb.firstGrace, "HETSYNC_JOIN_TIMEOUT"
			}
			hb.mu.Unlock()
			silent := now.Sub(p.Heard) - starved
			if p.Left || p.Failed != nil || silent <= 2*hb.interval {
				overloaded[r] = false
				continue
			}
			proc := hb.proc(r)
			st := proc.State()
			if st == procstat.StateStopped {
				// The join timeout is for a peer still finishing its join; a stopped process
				// finishes nothing.
				limit, limitFrom = hb.timeout, ""
			}
			if st == procstat.StateGone {
				// Two heartbeats missed and the kernel says the process is gone: it left the job
				// without a goodbye. Waiting out the limit would only delay the news.
				hb.died(r, &transport.PeerExitedError{Rank: hb.rank, Peer: r})
				continue
			}
			if silent <= limit {
				overloaded[r] = false
				continue
			}
			if st == procstat.StateRunning && hb.isNetApart(r) {
				// Alive on this kernel, behind another network namespace: the network between
				// the two is what failed.
				hb.died(r, &transport.UnresponsiveError{Rank: hb.rank, Peer: r, Silent: silent, Limit: limit, LimitFrom: limitFrom,
					State: procCause(st), LinkDown: true})
				continue
			}
			if st == procstat.StateRunning {
				// On this kernel and running: starved of CPU, not frozen.
				if !overloaded[r] {
					overloaded[r] = true
					hb.log.Warn("hetsync: peer sends no heartbeats but its process is running: the host is overloaded",
						"rank", hb.rank, "peer", r, "silent", silent.Round(time.Millisecond), "pid", proc.PID)
				}
				continue
			}
			hb.died(r, &transport.UnresponsiveError{Rank: hb.rank, Peer: r, Silent: silent, Limit: limit, LimitFrom: limitFrom, State: procCause(st)})
		}
		hb.mu.Lock()
		hb.checked = now
		hb.mu.Unlock()
	}
}

// Activity is the record this rank's heartbeats report (transport.Liveness).
func (e *endpoint) Activity() *transport.Activity {
	if e.hb != nil {
		return &e.hb.act
	}
	return &e.act
}

// Peer is what this rank knows of rank r from its heartbeats (transport.Liveness).
func (e *endpoint) Peer(r int) transport.PeerState {
	if e.hb != nil {
		return e.hb.Peer(r)
	}
	return transport.PeerState{}
}
