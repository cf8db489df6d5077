package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hetsync/hetsync/transport"
)

// Handler serves a rank's clients.
type Handler interface {
	// Serve handles one request or one-way message from a client. r.Body is valid until Serve
	// returns. A request is answered with Service.Reply or Service.Fail, from Serve or later
	// from any goroutine (a reply may be parked until another client's request releases it);
	// Serve must never wait for another rank's progress: the reader that calls it also hands
	// this rank the peer's replies. An error stops the service on this rank. s is the
	// service the request came to (it may not have been returned by Start yet).
	Serve(ctx context.Context, s *Service, r Request) error
}

// Leaver is implemented by handlers that must know when a client leaves (its bye: it sends
// this rank no more requests), for example to stop counting it among the clients to wait for.
type Leaver interface {
	Left(ctx context.Context, s *Service, peer int) error
}

// Request is what a Handler serves: a client's Msg, a request unless OneWay.
type Request struct {
	Peer   int
	OneWay bool
	Msg
}

// Spec describes a service on one rank. Every rank of the job that runs the service gives the
// same Name and Ops; each gives the ranks it serves and the ranks it calls.
type Spec struct {
	// Name identifies the service on every rank and decides its channel (ChannelOf).
	Name string
	// Ops names the service's operations: Msg.Op indexes it. Errors use the names.
	Ops []string
	// Handler serves the requests of Clients. Required when Clients is not empty.
	Handler Handler
	// Clients are the ranks that send this rank requests; Close waits for their bye.
	Clients []int
	// Servers are the ranks this rank sends requests to; Close says bye to them.
	Servers []int
	// MaxBody is the largest body this rank receives (a client's request, a server's reply);
	// a larger message is an error naming the service and the peer.
	MaxBody int
}

// Reply is a server's answer to this rank's request. Its Body is the reader's buffer: Release
// it once the body has been read, which lets the reader go on.
type Reply struct {
	Msg
	// Err is set when the server refused the request (Service.Fail); the error names the
	// service, the server and the request.
	Err error
	p   *peer
}

// Release hands the reply's buffer back to its reader. Every reply received from Replies or
// Wait must be released once; a zero Reply's Release does nothing.
func (r Reply) Release() {
	if r.p == nil {
		return
	}
	select {
	case r.p.consumed <- struct{}{}:
	case <-r.p.dead:
	}
}

// Service is one rank's part of a request/reply service: a reader goroutine per peer it
// serves or calls, the handler of its clients' requests, and its own requests' replies.
type Service struct {
	id      ident
	h       Handler
	peers   []*peer // by rank; nil for ranks this rank neither serves nor calls
	clients []int
	servers []int

	ctx     context.Context
	cancel  context.CancelFunc
	readers sync.WaitGroup
	closing atomic.Bool
	once    sync.Once
	closed  error

	errMu sync.Mutex
	err   error
}

// peer is this rank's side of the service with one other rank.
type peer struct {
	rank           int
	client, server bool
	buf            []byte       // the reader's receive buffer
	pending        atomic.Int32 // 1 + the op of this rank's request in flight to the peer, 0 when none
	replies        chan Reply   // reader → caller: a reply is in buf
	consumed       chan struct{}
	left           chan struct{} // closed when the client said bye, or its reader stopped
	acked          chan struct{} // closed when the server acknowledged this rank's bye
	dead           chan struct{} // closed when the reader stopped; deadErr says why
	deadErr        error
}

// Start starts this rank's part of the service described by spec on ep. ctx bounds the
// service's life: cancelling it stops every reader, as Abort does.
func Start(ctx context.Context, ep transport.Endpoint, spec Spec) (*Service, error) {
	id, err := newIdent(ep, spec.Name, spec.Ops)
	if err != nil {
		return nil, err
	}
	if len(spec.Clients) > 0 && spec.Handler == nil {
		return nil, fmt.Errorf("service %s: rank %d serves ranks %v but has no handler", id.name, id.rank, spec.Clients)
	}
	s := &Service{id: id, h: spec.Handler, peers: make([]*peer, ep.Size()),
		clients: append([]int(nil), spec.Clients...), servers: append([]int(nil), spec.Servers...)}
	if err := s.addPeers(spec.Clients, "client", func(p *peer) *bool { return &p.client }); err != nil {
		return nil, err
	}
	if err := s.addPeers(spec.Servers, "server", func(p *peer) *bool { return &p.server }); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	for _, p := range s.peers {
		if p == nil {
			continue
		}
		p.buf = make([]byte, max(spec.MaxBody, 0))
		s.readers.Add(1)
		go s.read(p)
	}
	return s, nil
}

// addPeers marks ranks as clients or servers (role), checking them against the job.
func (s *Service) addPeers(ranks []int, what string, role func(*peer) *bool) error {
	for _, r := range ranks {
		if r < 0 || r >= len(s.peers) {
			return s.id.errorf(r, "start", "%s rank out of range [0, %d)", what, len(s.peers))
		}
		p := s.peers[r]
		if p == nil {
			p = &peer{rank: r, replies: make(chan Reply), consumed: make(chan struct{}),
				left: make(chan struct{}), acked: make(chan struct{}), dead: make(chan struct{})}
			s.peers[r] = p
		}
		if *role(p) {
			return s.id.errorf(r, "start", "%s rank listed twice", what)
		}
		*role(p) = true
	}
	return nil
}

// Name is the service's name; Channel its channel.
func (s *Service) Name() string               { return s.id.name }
func (s *Service) Channel() transport.Channel { return s.id.ch }

// Err is the first error the service met on this rank, or nil.
func (s *Service) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *Service) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

// read is the reader of one peer: it serves the peer's requests (as its server) and hands
// its replies to this rank's waiting caller (as its client), until the peer leaves, the link
// fails, or the service stops.
func (s *Service) read(p *peer) {
	defer s.readers.Done()
	err := s.readLoop(p)
	switch {
	case err == nil:
		err = s.id.errorf(p.rank, "receive", "the rank left the service")
	case s.ctx.Err() != nil || errors.Is(err, errShut):
	default:
		s.fail(err)
		if p.client {
			// The client may wait for a reply that will never come: tell it.
			s.shut([]int{p.rank})
		}
	}
	p.deadErr = err
	close(p.dead)
}

// isClosed says whether ch, a channel that is only ever closed, is.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errShut marks a server's shutdown notice: the peer's calls fail, the service goes on.
var errShut = errors.New("the rank serves no more")

func (s *Service) readLoop(p *peer) error {
	for {
		h, n, err := s.id.ep.RecvAny(s.ctx, p.rank, s.id.ch, p.buf)
		if err != nil {
			if s.ctx.Err() != nil {
				return s.id.errorf(p.rank, "receive", "the service stopped on this rank: %w", s.ctx.Err())
			}
			return s.id.wrap(p.rank, "receive", err)
		}
		k, m, err := s.id.decode(p.rank, h, p.buf[:n])
		if err != nil {
			return err
		}
		fromClient := k == kindRequest || k == kindPost || k == kindBye
		if k == kindByeAck && isClosed(p.acked) {
			return s.id.errorf(p.rank, "receive", "a second %s", k)
		}
		if k == kindBye && isClosed(p.left) {
			return s.id.errorf(p.rank, "receive", "a second %s", k)
		}
		if fromClient && !p.client || !fromClient && !p.server {
			return s.id.errorf(p.rank, "receive", "got a %s of %s from a rank that is not this rank's %s",
				k, s.id.opName(m.Op), map[bool]string{true: "client", false: "server"}[fromClient])
		}
		switch k {
		case kindRequest, kindPost:
			if err := s.h.Serve(s.ctx, s, Request{Peer: p.rank, OneWay: k == kindPost, Msg: m}); err != nil {
				return s.id.wrap(p.rank, "serve "+s.id.opName(m.Op), err)
			}
		case kindReply, kindFail:
			if err := s.deliver(p, k, m); err != nil {
				return err
			}
		case kindBye:
			if l, ok := s.h.(Leaver); ok {
				if err := l.Left(s.ctx, s, p.rank); err != nil {
					return s.id.wrap(p.rank, "bye", err)
				}
			}
			// The acknowledgement goes out before the bye counts: once every client has
			// left, Close stops this rank's readers, and with them this send.
			if err := s.id.send(s.ctx, p.rank, kindByeAck, Msg{}); err != nil {
				return err
			}
			close(p.left)
			if !p.server || isClosed(p.acked) {
				return nil
			}
		case kindByeAck:
			close(p.acked)
			if !p.client || isClosed(p.left) {
				return nil
			}
		case kindShut:
			return s.id.wrap(p.rank, "receive", errShut)
		default:
			return s.id.errorf(p.rank, "receive", "a frame of unknown %s", k)
		}
	}
}

// deliver hands a reply (or refusal) from server p to the caller waiting for it, and waits
// until the caller released its body.
func (s *Service) deliver(p *peer, k kind, m Msg) error {
	want := p.pending.Load()
	switch {
	case want == 0:
		return s.id.errorf(p.rank, "receive", "a %s of %s with no request in flight", k, s.id.opName(m.Op))
	case uint8(want-1) != m.Op:
		return s.id.errorf(p.rank, "receive", "a %s of %s to a %s request", k, s.id.opName(m.Op), s.id.opName(uint8(want-1)))
	}
	p.pending.Store(0)
	r := Reply{Msg: m, p: p}
	if k == kindFail {
		r.Err = s.id.errorf(p.rank, s.id.opName(m.Op), "the server refused the request: %s", m.Body)
	}
	select {
	case p.replies <- r:
	case <-s.ctx.Done():
		return nil
	}
	select {
	case <-p.consumed:
	case <-s.ctx.Done():
	}
	return nil
}

// server is the peer state of server rank to, or an error naming what op wanted of it.
func (s *Service) server(to int, op string) (*peer, error) {
	if to < 0 || to >= len(s.peers) || s.peers[to] == nil || !s.peers[to].server {
		return nil, s.id.errorf(to, op, "the rank is not one of this rank's servers %v", s.servers)
	}
	return s.peers[to], nil
}

// Ask sends request m to server to; collect the reply with Wait or Replies. At most one
// request may be in flight per server.
func (s *Service) Ask(ctx context.Context, to int, m Msg) error {
	op := s.id.opName(m.Op)
	p, err := s.server(to, op)
	if err != nil {
		return err
	}
	if s.closing.Load() {
		return s.id.errorf(to, op, "the service is closed on this rank")
	}
	select {
	case <-p.dead:
		return s.id.wrap(to, op, p.deadErr)
	default:
	}
	if prev := p.pending.Load(); prev != 0 || !p.pending.CompareAndSwap(0, int32(m.Op)+1) {
		return s.id.errorf(to, op, "a %s request is still unanswered", s.id.opName(uint8(prev-1)))
	}
	if err := s.id.send(ctx, to, kindRequest, m); err != nil {
		p.pending.Store(0)
		s.fail(err)
		return err
	}
	return nil
}

// Replies delivers server from's replies, for a caller that waits for one among other
// events; Wait is the plain way. A reply received here must be released.
func (s *Service) Replies(from int) <-chan Reply {
	if p, err := s.server(from, "reply"); err == nil {
		return p.replies
	}
	return nil
}

// Wait waits for the reply to the request in flight to server from. A refusal is returned as
// the error (already released); a reply must be released once its body has been read.
func (s *Service) Wait(ctx context.Context, from int) (Reply, error) {
	p, err := s.server(from, "reply")
	if err != nil {
		return Reply{}, err
	}
	select {
	case r := <-p.replies:
		if r.Err != nil {
			r.Release()
			return Reply{}, r.Err
		}
		return r, nil
	case <-p.dead:
		if op := p.pending.Load(); op != 0 {
			return Reply{}, s.id.wrap(from, s.id.opName(uint8(op-1))+" request", p.deadErr)
		}
		return Reply{}, p.deadErr
	case <-ctx.Done():
		// The reply may still come: the service is unusable from here on.
		err := s.id.errorf(from, s.id.opName(uint8(p.pending.Load()-1))+" request", "waiting for the reply: %w", ctx.Err())
		s.fail(err)
		return Reply{}, err
	}
}

// Call is Ask, then Wait.
func (s *Service) Call(ctx context.Context, to int, m Msg) (Reply, error) {
	if err := s.Ask(ctx, to, m); err != nil {
		return Reply{}, err
	}
	return s.Wait(ctx, to)
}

// Post sends server to a one-way message: its handler serves it, nothing answers.
func (s *Service) Post(ctx context.Context, to int, m Msg) error {
	op := s.id.opName(m.Op)
	if _, err := s.server(to, op); err != nil {
		return err
	}
	if s.closing.Load() {
		return s.id.errorf(to, op, "the service is closed on this rank")
	}
	return s.id.send(ctx, to, kindPost, m)
}

// Reply answers client to's request in flight with m; m.Op must be the request's.
func (s *Service) Reply(ctx context.Context, to int, m Msg) error {
	return s.id.send(ctx, to, kindReply, m)
}

// Fail refuses client to's request op in flight, for reason.
func (s *Service) Fail(ctx context.Context, to int, op uint8, reason error) error {
	return s.id.send(ctx, to, kindFail, Msg{Op: op, Body: []byte(reason.Error())})
}

// Close is the service's shutdown on this rank: it says bye to its servers (those it can still
// reach) and waits for their acknowledgements (read at once by their readers), waits until
// every client has said bye (or its link failed), and stops the readers. A server returns only once its clients are done
// with it. When ctx ends first, the clients still calling are told that this rank serves no
// more (their pending requests fail with an error naming the service, this rank and the
// request) and Close returns an error naming them. It returns the first error the service met.
func (s *Service) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.closing.Store(true)
		var errs []error
		for _, r := range s.servers {
			// A server whose reader stopped (it stopped serving this rank, or its link
			// failed, which Err reports) reads no bye: as Abort, send it none.
			if isClosed(s.peers[r].dead) {
				continue
			}
			if err := s.id.send(ctx, r, kindBye, Msg{}); err != nil {
				errs = append(errs, err)
			}
		}
		if r := s.await(ctx, s.servers, func(p *peer) <-chan struct{} { return p.acked }); len(r) > 0 {
			errs = append(errs, s.id.errorf(r[0], "close", "servers %v did not acknowledge this rank's bye: %w", r, ctx.Err()))
		}
		if r := s.await(ctx, s.clients, func(p *peer) <-chan struct{} { return p.left }); len(r) > 0 {
			s.shut(r)
			errs = append(errs, s.id.errorf(r[0], "close", "ranks %v did not say bye: %w", r, ctx.Err()))
		}
		s.stop()
		s.closed = errors.Join(append([]error{s.Err()}, errs...)...)
	})
	return s.closed
}

// await waits until, for every rank of ranks, the peer's event has happened or its reader has
// stopped, or ctx ends; it returns the ranks still awaited then.
func (s *Service) await(ctx context.Context, ranks []int, event func(*peer) <-chan struct{}) []int {
	var late []int
	for _, r := range ranks {
		p := s.peers[r]
		if isClosed(event(p)) || isClosed(p.dead) {
			continue
		}
		select {
		case <-event(p):
		case <-p.dead:
		case <-ctx.Done():
			late = append(late, r)
		}
	}
	return late
}

// shut tells clients that this rank serves them no more; on the service's own context, since
// the caller's may have ended.
func (s *Service) shut(clients []int) {
	for _, r := range clients {
		if !isClosed(s.peers[r].dead) {
			_ = s.id.send(s.ctx, r, kindShut, Msg{})
		}
	}
}

// Abort stops the service on this rank at once, for a failed run whose peers may never say
// bye: it tells its servers bye and its clients that it serves no more, waiting for none of
// them, and stops its readers; its pending calls fail.
func (s *Service) Abort() {
	s.once.Do(func() {
		s.closing.Store(true)
		for _, r := range s.servers {
			if !isClosed(s.peers[r].dead) {
				_ = s.id.send(s.ctx, r, kindBye, Msg{})
			}
		}
		var unfinished []int
		for _, r := range s.clients {
			if !isClosed(s.peers[r].left) {
				unfinished = append(unfinished, r)
			}
		}
		s.shut(unfinished)
		s.stop()
		s.closed = s.Err()
	})
}

// stop ends the readers and waits for them.
func (s *Service) stop() {
	s.cancel()
	s.readers.Wait()
}
