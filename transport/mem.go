package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hetsync/hetsync/compress"
)

// NewMemJob returns the endpoints of an in-process job of size ranks. Messages are copied, so a
// sender may reuse its buffer as soon as Send returns, as with the network transports.
func NewMemJob(size int) []Endpoint {
	return NewMemJobArena(size, 0)
}

// NewMemJobArena is NewMemJob whose endpoints also share an Arena of arenaBytes (none when
// arenaBytes is 0), as the ranks of one host do.
func NewMemJobArena(size, arenaBytes int) []Endpoint {
	job := &memJob{size: size, boxes: make(map[memKey]*mailbox), closed: make([]chan struct{}, size), anyClosed: make(chan struct{})}
	if arenaBytes > 0 {
		job.arena = newMemArena(job, arenaBytes)
	}
	eps := make([]Endpoint, size)
	for r := range eps {
		job.closed[r] = make(chan struct{})
		eps[r] = &memEndpoint{job: job, rank: r, closed: job.closed[r]}
	}
	return eps
}

type memKey struct {
	from, to int
	ch       Channel
}

type memJob struct {
	size  int
	mu    sync.Mutex
	boxes map[memKey]*mailbox
	// closed[r] is closed when rank r closes its endpoint: as when a process's connections
	// close, its peers' receives from it fail once they have taken what it sent.
	closed []chan struct{}
	// anyClosed is closed with the first of closed: an arena's waiters watch every rank.
	anyClosed     chan struct{}
	anyClosedOnce sync.Once
	arena         *memArena // nil unless the job was made with one
}

// firstClosed is the lowest rank whose endpoint is closed, -1 when none is.
func (j *memJob) firstClosed() int {
	for r, c := range j.closed {
		select {
		case <-c:
			return r
		default:
		}
	}
	return -1
}

func (j *memJob) box(k memKey) *mailbox { return mailboxOf(&j.mu, j.boxes, k) }

// mailboxOf returns boxes[k], made on first use; mu guards boxes. The in-process job keys its
// mailboxes by sender, receiver and channel, a stream endpoint's sends to itself by channel.
func mailboxOf[K comparable](mu *sync.Mutex, boxes map[K]*mailbox, k K) *mailbox {
	mu.Lock()
	defer mu.Unlock()
	b := boxes[k]
	if b == nil {
		b = &mailbox{signal: make(chan struct{}, 1)}
		boxes[k] = b
	}
	return b
}

type memMsg struct {
	h       Header
	payload []byte
}

// mailbox is an unbounded FIFO with one consumer.
type mailbox struct {
	mu     sync.Mutex
	queue  []memMsg
	signal chan struct{}
}

func (b *mailbox) put(m memMsg) {
	b.mu.Lock()
	b.queue = append(b.queue, m)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take returns the oldest message; it fails when ctx ends, when this rank's endpoint closes
// (closed), or when the sender's closed (peerClosed) and every message it sent was taken.
func (b *mailbox) take(ctx context.Context, closed, peerClosed <-chan struct{}) (memMsg, error) {
	senderGone := false
	for {
		b.mu.Lock()
		if len(b.queue) > 0 {
			m := b.queue[0]
			b.queue[0] = memMsg{}
			b.queue = b.queue[1:]
			b.mu.Unlock()
			return m, nil
		}
		b.mu.Unlock()
		if senderGone {
			// The sender's puts happened before its close: the queue held all of them.
			return memMsg{}, errPeerClosed
		}
		select {
		case <-b.signal:
		case <-ctx.Done():
			return memMsg{}, ctx.Err()
		case <-closed:
			return memMsg{}, errEndpointClosed
		case <-peerClosed:
			senderGone = true
		}
	}
}

var (
	errEndpointClosed = errors.New("endpoint closed")
	errPeerClosed     = errors.New("the peer closed its endpoint (its rank ended)")
)

// traffic counts an endpoint's messages and bytes for its Stats.
type traffic struct {
	msgsSent, msgsRecv, bytesSent, bytesRecv, wireSent, wireRecv atomic.Uint64
}

func (t *traffic) snapshot() Stats {
	return Stats{
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecv.Load(),
		BytesSent: t.bytesSent.Load(), BytesRecv: t.bytesRecv.Load(),
		WireBytesSent: t.wireSent.Load(), WireBytesRecv: t.wireRecv.Load(),
	}
}

// post sends a message through a mailbox, as the in-process job does and a stream endpoint
// does to itself: through the codec's round trip, so that a lossy codec loses what the wire
// would, and counted before delivery: once the receiver can take the message (and answer
// it), the sender's Stats already show it sent.
func post(box *mailbox, t *traffic, h Header, payload []byte) error {
	data, err := memRoundTrip(h.Codec, payload)
	if err != nil {
		return err
	}
	t.msgsSent.Add(1)
	t.bytesSent.Add(uint64(len(payload)))
	box.put(memMsg{h: h, payload: data})
	return nil
}

// deliver copies m, taken from a mailbox of rank's messages from rank from, into buf and
// counts it received.
func deliver(rank, from int, m memMsg, buf []byte, t *traffic) (Header, int, error) {
	if len(m.payload) > len(buf) {
		return m.h, 0, &PeerError{Rank: rank, Peer: from, Op: "recv " + m.h.String(),
			Err: fmt.Errorf("message of %d bytes does not fit the %d-byte buffer", len(m.payload), len(buf))}
	}
	n := copy(buf, m.payload)
	t.msgsRecv.Add(1)
	t.bytesRecv.Add(uint64(n))
	return m.h, n, nil
}

// checkedRecv is Recv's answer from a receive matched by channel alone: the message's header
// must be the one the caller wanted.
func checkedRecv(rank, from int, want, got Header, n int, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if err := CheckHeader(rank, from, want, got); err != nil {
		return 0, err
	}
	return n, nil
}

type memEndpoint struct {
	job       *memJob
	rank      int
	closed    chan struct{}
	closeOnce sync.Once
	stats     traffic
}

func (e *memEndpoint) Rank() int { return e.rank }

// SameHost puts every rank of an in-process job on one host: they share the process.
func (e *memEndpoint) SameHost() []bool {
	row := make([]bool, e.job.size)
	for r := range row {
		row[r] = true
	}
	return row
}
func (e *memEndpoint) Size() int { return e.job.size }

func (e *memEndpoint) Send(ctx context.Context, to int, h Header, payload []byte) error {
	if err := checkPeer(e.rank, e.job.size, to, "send"); err != nil {
		return err
	}
	select {
	case <-e.closed:
		return &PeerError{Rank: e.rank, Peer: to, Op: "send", Err: errEndpointClosed}
	case <-ctx.Done():
		return &PeerError{Rank: e.rank, Peer: to, Op: "send", Err: ctx.Err()}
	default:
	}
	if err := post(e.job.box(memKey{from: e.rank, to: to, ch: h.Channel}), &e.stats, h, payload); err != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	return nil
}

func (e *memEndpoint) recv(ctx context.Context, from int, ch Channel, buf []byte) (Header, int, error) {
	if err := checkPeer(e.rank, e.job.size, from, "recv"); err != nil {
		return Header{}, 0, err
	}
	m, err := e.job.box(memKey{from: from, to: e.rank, ch: ch}).take(ctx, e.closed, e.job.closed[from])
	if err != nil {
		return Header{}, 0, &PeerError{Rank: e.rank, Peer: from, Op: fmt.Sprintf("recv on channel %d", ch), Err: err}
	}
	return deliver(e.rank, from, m, buf, &e.stats)
}

func (e *memEndpoint) Recv(ctx context.Context, from int, want Header, buf []byte) (int, error) {
	got, n, err := e.recv(ctx, from, want.Channel, buf)
	return checkedRecv(e.rank, from, want, got, n, err)
}

func (e *memEndpoint) RecvAny(ctx context.Context, from int, ch Channel, buf []byte) (Header, int, error) {
	return e.recv(ctx, from, ch, buf)
}

func (e *memEndpoint) Stats() Stats {
	s := e.stats.snapshot()
	s.WireBytesSent, s.WireBytesRecv = s.BytesSent, s.BytesRecv
	return s
}

func (e *memEndpoint) Close() error {
	e.closeOnce.Do(func() {
		close(e.closed)
		e.job.anyClosedOnce.Do(func() { close(e.job.anyClosed) })
	})
	return nil
}

// Arena is the job's shared arena (ArenaHolder), nil unless made by NewMemJobArena.
func (e *memEndpoint) Arena() Arena {
	if e.job.arena == nil {
		return nil
	}
	return e.job.arena
}

// memRoundTrip copies payload as the wire would deliver it: lossy codecs round the values.
// Lossless codecs are not run: they would give the same bytes back at some cost.
func memRoundTrip(c Codec, payload []byte) ([]byte, error) {
	if !c.Known() {
		return nil, fmt.Errorf("unknown codec %d", c)
	}
	out := make([]byte, len(payload))
	if !c.Lossy() {
		copy(out, payload)
		return out, nil
	}
	if len(payload)%4 != 0 {
		return nil, fmt.Errorf("%v: %d bytes: %w", c, len(payload), errNotFloat32)
	}
	wire := make([]byte, len(payload)/2)
	if c == CodecFP16 {
		compress.Float32ToFP16(wire, payload)
		compress.FP16ToFloat32(out, wire)
	} else {
		compress.Float32ToBF16(wire, payload)
		compress.BF16ToFloat32(out, wire)
	}
	return out, nil
}
