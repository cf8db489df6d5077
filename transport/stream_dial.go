package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// A stream endpoint that connects on first use: a rank links only to the peers its
// collectives and services talk to, so that a ring or butterfly job of p ranks holds O(log p)
// connections per rank instead of p-1.

// DialFunc opens the connection from this rank to peer. It returns the connection, or nil
// when the peer's own connection to this rank was attached meanwhile (Attacher: both ranks
// dialed each other at once and the peer's dial won), or an error naming the peer. It must
// honour ctx and bound its own time: the endpoint cancels ctx when it closes.
type DialFunc func(ctx context.Context, peer int) (io.ReadWriteCloser, error)

// Attacher is implemented by endpoints that take connections dialed by their peers: Attach
// hands over the connection from peer, which the endpoint owns from then on. It fails (and the
// caller closes c) when the endpoint already has a link to peer, has failed it, or is closed.
type Attacher interface {
	Attach(peer int, c io.ReadWriteCloser) error
}

// Linked is implemented by endpoints that connect on first use: Linked reports which peers
// this rank holds a connection to now (this rank's own entry is false).
type Linked interface {
	Linked() []bool
}

// NewDialingStreamEndpoint is NewStreamEndpoint for a job whose links open on first use:
// conns holds the connections this rank has already (nil entries, or a nil slice, for none),
// and the first Send to or Recv from a peer without one calls dial, once per peer, and waits
// for its connection, or for the peer's (Attach), whichever comes. A dial that fails fails
// every waiting and later call on that peer with an error naming it. Both sides take part, so
// that a receiver whose peer is gone learns it within the dial's bound instead of waiting for
// a message that cannot come.
func NewDialingStreamEndpoint(rank, size int, conns []io.ReadWriteCloser, dial DialFunc, opts StreamOptions) (Endpoint, error) {
	if dial == nil {
		return nil, fmt.Errorf("stream endpoint: rank %d: no dial function", rank)
	}
	if conns == nil && size > 0 {
		conns = make([]io.ReadWriteCloser, size)
	}
	return newStream(rank, size, conns, dial, opts)
}

// lazyLinks is the connecting side of an endpoint with a DialFunc: one wait per peer that a
// call needs and that has no link yet, one dial per such wait.
type lazyLinks struct {
	dial   DialFunc
	ctx    context.Context // cancelled by Close: dials in flight end
	cancel context.CancelFunc
	dials  sync.WaitGroup

	mu     sync.Mutex
	closed bool
	waits  map[int]*linkWait
	failed map[int]error // peers whose dial failed or that were failed before they linked
}

// linkWait is the wait for one peer's link: ready closes when the link is up (the endpoint's
// peers entry is set) or failed (err).
type linkWait struct {
	ready chan struct{}
	err   error
}

func newLazyLinks(dial DialFunc) *lazyLinks {
	ctx, cancel := context.WithCancel(context.Background())
	return &lazyLinks{dial: dial, ctx: ctx, cancel: cancel, waits: make(map[int]*linkWait), failed: make(map[int]error)}
}

// link returns the link to peer, dialing it first when there is none.
func (e *streamEndpoint) link(ctx context.Context, peer int) (*streamPeer, error) {
	if p := e.peers[peer].Load(); p != nil {
		return p, nil
	}
	l := e.lazy
	if l == nil {
		// An endpoint without a dialer has every link from the start.
		return nil, errors.New("no connection (internal error)")
	}
	l.mu.Lock()
	if p := e.peers[peer].Load(); p != nil {
		l.mu.Unlock()
		return p, nil
	}
	if l.closed {
		l.mu.Unlock()
		return nil, errEndpointClosed
	}
	if err := l.failed[peer]; err != nil {
		l.mu.Unlock()
		return nil, err
	}
	w := l.waits[peer]
	if w == nil {
		w = &linkWait{ready: make(chan struct{})}
		l.waits[peer] = w
		l.dials.Add(1)
		go e.dialPeer(peer, w)
	}
	l.mu.Unlock()
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.closed:
		return nil, errEndpointClosed
	}
	if p := e.peers[peer].Load(); p != nil {
		return p, nil
	}
	return nil, w.err
}

// dialPeer dials peer for w and settles w with the link or the failure, unless an Attach
// settled it first.
func (e *streamEndpoint) dialPeer(peer int, w *linkWait) {
	l := e.lazy
	defer l.dials.Done()
	c, err := l.dial(l.ctx, peer)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		if l.waits[peer] == w {
			err = fmt.Errorf("connecting: %w", err)
			l.failed[peer] = err
			l.settle(peer, err)
		}
	case c == nil:
		if e.peers[peer].Load() == nil && l.waits[peer] == w {
			err := errors.New("connecting: the dial returned no connection and the peer's never came")
			l.failed[peer] = err
			l.settle(peer, err)
		}
	default:
		if aerr := e.attachLocked(peer, c); aerr != nil {
			// The peer's own connection came first (or the endpoint closed): this one is spare.
			c.Close()
		}
	}
}

// settle ends the wait for peer, if any, with err (nil: linked); l.mu must be held.
func (l *lazyLinks) settle(peer int, err error) {
	if w := l.waits[peer]; w != nil {
		w.err = err
		close(w.ready)
		delete(l.waits, peer)
	}
}

// Attach takes the connection peer dialed to this rank (Attacher).
func (e *streamEndpoint) Attach(peer int, c io.ReadWriteCloser) error {
	if err := checkPeer(e.rank, e.size, peer, "attach"); err != nil {
		return err
	}
	if peer == e.rank || e.lazy == nil {
		return &PeerError{Rank: e.rank, Peer: peer, Op: "attach", Err: errors.New("this endpoint takes no connections from that rank")}
	}
	e.lazy.mu.Lock()
	defer e.lazy.mu.Unlock()
	return e.attachLocked(peer, c)
}

// attachLocked makes c the link to peer and starts its reader; e.lazy.mu must be held.
func (e *streamEndpoint) attachLocked(peer int, c io.ReadWriteCloser) error {
	l := e.lazy
	switch {
	case l.closed:
		return &PeerError{Rank: e.rank, Peer: peer, Op: "attach", Err: errEndpointClosed}
	case e.peers[peer].Load() != nil:
		return &PeerError{Rank: e.rank, Peer: peer, Op: "attach", Err: errors.New("already connected")}
	case l.failed[peer] != nil:
		return &PeerError{Rank: e.rank, Peer: peer, Op: "attach", Err: l.failed[peer]}
	}
	p := e.newPeer(peer, c)
	e.peers[peer].Store(p)
	e.wg.Add(1)
	go p.readLoop()
	l.settle(peer, nil)
	return nil
}

// failUnlinked records err as peer's failure when peer has no link yet, and reports whether
// it had none: its waiting and later calls fail with err.
func (e *streamEndpoint) failUnlinked(peer int, err error) bool {
	l := e.lazy
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.peers[peer].Load() != nil {
		return false
	}
	if l.failed[peer] == nil {
		l.failed[peer] = err
	}
	l.settle(peer, l.failed[peer])
	return true
}

// Linked reports the peers this rank holds a connection to (Linked).
func (e *streamEndpoint) Linked() []bool {
	row := make([]bool, e.size)
	for i := range e.peers {
		row[i] = e.peers[i].Load() != nil
	}
	return row
}

// close stops new links and ends the dials in flight; Close calls it first.
func (l *lazyLinks) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.dials.Wait()
}
