package transport

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Activity is what this rank's callers last did on its endpoint, as its heartbeats tell the
// peers: the sequence number and kind of the last call started, when, and whether it has
// completed. Every communicator over one endpoint writes the same record (the last writer
// wins, which is what "this rank last did" means). The transport carries Op opaquely: it is
// the caller's own code for the kind of call. Lock-free, so that a collective pays a few atomic
// stores per call for it.
type Activity struct {
	seq   atomic.Uint64
	op    atomic.Uint32 // caller's code, 0 before the first call
	done  atomic.Bool
	since atomic.Int64 // unix nanoseconds when the call started or completed
}

// Start records that call seq of kind op started at now.
func (a *Activity) Start(seq uint64, op uint8, now time.Time) {
	a.done.Store(false)
	a.seq.Store(seq)
	a.op.Store(uint32(op))
	a.since.Store(now.UnixNano())
}

// Done records that call seq completed at now.
func (a *Activity) Done(seq uint64, now time.Time) {
	if a.seq.Load() == seq {
		a.since.Store(now.UnixNano())
		a.done.Store(true)
	}
}

// Load is the record: the last call's sequence number, kind code (0 before any call),
// whether it completed, and when it started or completed.
func (a *Activity) Load() (seq uint64, op uint8, done bool, since time.Time) {
	ns := a.since.Load()
	if ns != 0 {
		since = time.Unix(0, ns)
	}
	return a.seq.Load(), uint8(a.op.Load()), a.done.Load(), since
}

// PeerState is what this rank knows of a peer from its heartbeats.
type PeerState struct {
	// Heard is when the peer's last heartbeat arrived (zero before the first).
	Heard time.Time
	// Seq, Op and Done are the peer's Activity as its last heartbeat reported it; At is when
	// that activity started (or completed), estimated on this rank's clock from the age the
	// peer reported. Op is 0 when the peer had made no call.
	Seq  uint64
	Op   uint8
	Done bool
	At   time.Time
	// Left says that the peer closed its endpoint and said goodbye.
	Left bool
	// Failed is the error this rank failed the peer with (unresponsive, died), nil otherwise.
	Failed error
	// RTT is the round trip of the last heartbeat the peer answered, 0 before the first.
	RTT time.Duration
}

// Liveness is implemented by endpoints that exchange heartbeats with their peers (the p2p
// transport): a peer that stops answering is failed with an *UnresponsiveError, and what each
// peer last did can be asked.
type Liveness interface {
	// Activity is the record this rank's heartbeats report; callers write it.
	Activity() *Activity
	// Peer is what this rank knows of rank peer.
	Peer(peer int) PeerState
}

// LivenessOf is the Liveness of ep, or of the first endpoint under its decorators that has
// one (As); false when none has.
func LivenessOf(ep Endpoint) (Liveness, bool) { return As[Liveness](ep) }

// UnresponsiveError says that a peer stopped sending heartbeats on the control path: the
// process is frozen (SIGSTOP, a paused VM, a host that stopped scheduling it) or dead, or,
// for a peer on another host, the network between the two hosts is down. Silence alone
// cannot tell these apart; for a peer on this rank's host the kernel can (State).
type UnresponsiveError struct {
	Rank, Peer int
	// Silent is how long the peer had been silent.
	Silent time.Duration
	// Limit is the silence that failed the peer: the peer timeout, or the join timeout when
	// that is longer and the peer was given it (not heard from yet, or its stream was reset).
	Limit time.Duration
	// LimitFrom is the setting Limit comes from; "" is HETSYNC_PEER_TIMEOUT.
	LimitFrom string
	// State is what the kernel says of a silent peer on this rank's host ("stopped (SIGSTOP
	// or a tracer)", "exited"), "" for a peer on another host.
	State string
	// LinkDown says that the peer's process was seen running (on this kernel, in another
	// network namespace) while silent: the network between the two hosts is down.
	LinkDown bool
}

func (e *UnresponsiveError) Error() string {
	from := e.LimitFrom
	if from == "" {
		from = "HETSYNC_PEER_TIMEOUT"
	}
	if e.LinkDown {
		return fmt.Sprintf("rank %d: rank %d is unresponsive: no heartbeat for %v (limit %v, %s): unreachable: its process is %s "+
			"(on this machine, in another network namespace), so the network between the hosts is down",
			e.Rank, e.Peer, e.Silent.Round(time.Millisecond), e.Limit, from, e.State)
	}
	if e.State != "" {
		return fmt.Sprintf("rank %d: rank %d is unresponsive: no heartbeat for %v (limit %v, %s): its process is %s",
			e.Rank, e.Peer, e.Silent.Round(time.Millisecond), e.Limit, from, e.State)
	}
	return fmt.Sprintf("rank %d: rank %d is unresponsive: no heartbeat for %v (limit %v, %s): unreachable from this host: "+
		"its process is frozen or dead, or the network between the hosts is down (a link, a switch, a firewall)",
		e.Rank, e.Peer, e.Silent.Round(time.Millisecond), e.Limit, from)
}

// PeerExitedError says that a peer's process exited while this rank was still in the job with
// it, without closing its endpoint (it returned from main without Close, called os.Exit, or
// crashed without a signal this rank could see). Only a peer on this rank's host can be known
// to have exited; one on another host that leaves this way falls silent (UnresponsiveError).
type PeerExitedError struct {
	Rank, Peer int
}

func (e *PeerExitedError) Error() string {
	return fmt.Sprintf("rank %d: rank %d exited while this rank was still in the job: its process is gone and it never closed its endpoint",
		e.Rank, e.Peer)
}

// PeerReportedError says that another rank failed a peer and told this rank: a rank watches
// the heartbeats of only some peers (those it links to, and a few more that keep every rank
// watched), so a rank that waits on a frozen or dead peer through others, or that must first
// connect to it, learns of it from the ranks that saw it, the news passed on from rank to rank
// along the heartbeats. By is the rank that told this one; Exited says the peer's process was
// seen gone (else it fell silent).
type PeerReportedError struct {
	Rank, Peer, By int
	Exited         bool
}

func (e *PeerReportedError) Error() string {
	if e.Exited {
		return fmt.Sprintf("rank %d: rank %d exited while this rank was still in the job: its process is gone, as rank %d told this rank",
			e.Rank, e.Peer, e.By)
	}
	return fmt.Sprintf("rank %d: rank %d is unresponsive: the ranks that watch it heard no heartbeat from it within their limit, as rank %d told this rank",
		e.Rank, e.Peer, e.By)
}

// PeerFailer is implemented by endpoints that can fail a peer from outside the data path: its
// pending and later receives and sends fail with err.
type PeerFailer interface {
	FailPeer(peer int, err error)
}

// FailPeer fails every pending and later Recv from peer with err (messages already queued
// stay deliverable) and closes the connection, so that a Send blocked on it returns and the
// peer, should it wake, sees the link gone. A connection that had merely ended cleanly takes
// err as its error: err says why it ended (the peer exited), which the end itself does not.
func (e *streamEndpoint) FailPeer(peer int, err error) {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return
	}
	if e.failUnlinked(peer, err) {
		return
	}
	p := e.peers[peer].Load()
	p.mu.Lock()
	if errors.Is(p.err, errClosedByPeer) {
		p.err = nil
	}
	p.mu.Unlock()
	p.fail(err)
	p.conn.Close()
}
