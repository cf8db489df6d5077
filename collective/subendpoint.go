package collective

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/transport"
)

// subEndpoint is a sub-communicator's view of the job's endpoint: ranks 0..len(ranks)-1 of the
// sub-communicator map to ranks of the job's endpoint, and its two conversations,
// chanCollective and chanP2P, travel on channels of their own: ch and
// ch+1. Its members agreed on them in Split, and no other communicator this rank belongs to
// uses them, so messages of two communicators (or of one's collectives and its point-to-point
// messages) never meet in one FIFO, whichever goroutines run them.
//
// It wraps the job's endpoint itself, never another subEndpoint: a split of a split maps its
// ranks straight to job ranks.
type subEndpoint struct {
	base  transport.Endpoint
	ranks []int // sub-communicator rank -> job rank
	rank  int
	ch    transport.Channel
	act   transport.Activity // Activity's record when the job's endpoint has no heartbeats
}

// newSubEndpoint returns a subEndpoint over base, one that lends payloads when base, or an
// endpoint under its decorators, does.
func newSubEndpoint(base transport.Endpoint, ranks []int, rank int, ch transport.Channel) transport.Endpoint {
	e := &subEndpoint{base: base, ranks: ranks, rank: rank, ch: ch}
	if br, ok := transport.As[transport.Borrower](base); ok {
		return &borrowingSubEndpoint{subEndpoint: e, br: br}
	}
	return e
}

// Unwrap is the job's endpoint (transport.Decorator), through which transport.As finds what
// passes through unchanged (transport.LargeSegmenter). What names ranks the sub-communicator
// renumbers below, and what only the job's own communicator may use it hides, so that As
// never hands out an answer in the job's ranks.
func (e *subEndpoint) Unwrap() transport.Endpoint { return e.base }

// SameHost is the job endpoint's proven hosts of the sub-communicator's ranks
// (transport.HostLocality).
func (e *subEndpoint) SameHost() []bool {
	job := transport.SameHost(e.base)
	row := make([]bool, len(e.ranks))
	for i, jr := range e.ranks {
		row[i] = job[jr]
	}
	return row
}

// DataPaths is the job endpoint's data path to each rank of the sub-communicator, nil when
// it reports none (dataPather).
func (e *subEndpoint) DataPaths() []string {
	d, ok := transport.As[dataPather](e.base)
	if !ok {
		return nil
	}
	job := d.DataPaths()
	if len(job) != e.base.Size() {
		return nil
	}
	paths := make([]string, len(e.ranks))
	for i, jr := range e.ranks {
		paths[i] = job[jr]
	}
	return paths
}

// Arena is nil (transport.ArenaHolder): the host's arena serves the job's own communicator,
// whose ranks and call sequence it is laid out for, not a part of it.
func (e *subEndpoint) Arena() transport.Arena { return nil }

// Activity is the job endpoint's record of this rank's activity (transport.Liveness), or
// the sub-communicator's own when the job's endpoint has no heartbeats.
func (e *subEndpoint) Activity() *transport.Activity {
	if l, ok := transport.LivenessOf(e.base); ok {
		return l.Activity()
	}
	return &e.act
}

// Peer is what the job's heartbeats know of the sub-communicator's rank peer
// (transport.Liveness): nothing when the job's endpoint has none, or peer is out of range.
func (e *subEndpoint) Peer(peer int) transport.PeerState {
	if l, ok := transport.LivenessOf(e.base); ok && peer >= 0 && peer < len(e.ranks) {
		return l.Peer(e.ranks[peer])
	}
	return transport.PeerState{}
}

// FailPeer fails the job rank of the sub-communicator's rank peer on the job's endpoint, when
// it can fail peers (transport.PeerFailer).
func (e *subEndpoint) FailPeer(peer int, err error) {
	if f, ok := transport.As[transport.PeerFailer](e.base); ok && peer >= 0 && peer < len(e.ranks) {
		f.FailPeer(e.ranks[peer], err)
	}
}

func (e *subEndpoint) Rank() int { return e.rank }
func (e *subEndpoint) Size() int { return len(e.ranks) }

// jobRank maps a peer rank of the sub-communicator to the job rank and the channel the caller
// asked for to the job endpoint's (a sub-communicator carries only its collectives and its
// point-to-point messages).
func (e *subEndpoint) jobRank(peer int, ch transport.Channel, op string) (int, transport.Channel, error) {
	if peer < 0 || peer >= len(e.ranks) {
		return 0, 0, &transport.PeerError{Rank: e.rank, Peer: peer, Op: op + " (sub-communicator)",
			Err: fmt.Errorf("peer rank out of range [0, %d)", len(e.ranks))}
	}
	bch, ok := e.baseChannel(ch)
	if !ok {
		return 0, 0, &transport.PeerError{Rank: e.rank, Peer: peer, Op: op + " (sub-communicator)",
			Err: fmt.Errorf("channel %d: a sub-communicator's endpoint carries only channels %d and %d",
				ch, chanCollective, chanP2P)}
	}
	return e.ranks[peer], bch, nil
}

// baseChannel is the job endpoint's channel for the sub-communicator's channel ch.
func (e *subEndpoint) baseChannel(ch transport.Channel) (transport.Channel, bool) {
	switch ch {
	case chanCollective:
		return e.ch, true
	case chanP2P:
		return e.ch + 1, true
	}
	return 0, false
}

// channel is the job endpoint's channel of the sub-communicator's collectives (subChanneler).
func (e *subEndpoint) channel() transport.Channel { return e.ch }

// subChanneler is implemented by a sub-communicator's endpoint: channel is where its
// collectives travel on the job's endpoint.
type subChanneler interface {
	channel() transport.Channel
}

// wrap names the sub-communicator ranks around an error of the job's endpoint, which names
// job ranks.
func (e *subEndpoint) wrap(peer int, op string, err error) error {
	if err == nil {
		return nil
	}
	return &transport.PeerError{Rank: e.rank, Peer: peer,
		Op: fmt.Sprintf("%s (sub-communicator on channel %#x)", op, uint16(e.ch)), Err: err}
}

// fromBase turns a header received on one of the sub-communicator's channels back into the
// one its sender handed to Send.
func (e *subEndpoint) fromBase(h transport.Header) transport.Header {
	switch h.Channel {
	case e.ch:
		h.Channel = chanCollective
	case e.ch + 1:
		h.Channel = chanP2P
	}
	return h
}

func (e *subEndpoint) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	jr, bch, err := e.jobRank(to, h.Channel, "send")
	if err != nil {
		return err
	}
	h.Channel = bch
	return e.wrap(to, "send", e.base.Send(ctx, jr, h, payload))
}

func (e *subEndpoint) RecvAny(ctx context.Context, from int, ch transport.Channel, buf []byte) (transport.Header, int, error) {
	jr, bch, err := e.jobRank(from, ch, "recv")
	if err != nil {
		return transport.Header{}, 0, err
	}
	got, n, err := e.base.RecvAny(ctx, jr, bch, buf)
	return e.fromBase(got), n, e.wrap(from, "recv", err)
}

func (e *subEndpoint) Recv(ctx context.Context, from int, want transport.Header, buf []byte) (int, error) {
	got, n, err := e.RecvAny(ctx, from, want.Channel, buf)
	if err != nil {
		return 0, err
	}
	if err := transport.CheckHeader(e.rank, from, want, got); err != nil {
		return 0, err
	}
	return n, nil
}

// Stats are the job endpoint's: the traffic of every communicator over it.
func (e *subEndpoint) Stats() transport.Stats { return e.base.Stats() }

// Close does nothing: the job's endpoint, which the parent communicator shares, owns the
// connections.
func (e *subEndpoint) Close() error { return nil }

// borrowingSubEndpoint is a subEndpoint over an endpoint that lends received payloads; it lends
// them too, so that a sub-communicator reduces from the endpoint's buffers as its parent does.
type borrowingSubEndpoint struct {
	*subEndpoint
	br transport.Borrower
}

var _ transport.Borrower = (*borrowingSubEndpoint)(nil)

func (e *borrowingSubEndpoint) RecvBorrow(ctx context.Context, from int, ch transport.Channel) (transport.Header, []byte, error) {
	jr, bch, err := e.jobRank(from, ch, "recv")
	if err != nil {
		return transport.Header{}, nil, err
	}
	got, payload, err := e.br.RecvBorrow(ctx, jr, bch)
	return e.fromBase(got), payload, e.wrap(from, "recv", err)
}

func (e *borrowingSubEndpoint) ReleaseBorrowed(from int, ch transport.Channel) {
	jr, bch, err := e.jobRank(from, ch, "release")
	if err != nil {
		return
	}
	e.br.ReleaseBorrowed(jr, bch)
}
