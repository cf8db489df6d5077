package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// StreamOptions configure NewStreamEndpoint.
type StreamOptions struct {
	// Checksum adds a CRC-32C of every payload to its frame. Turn it off only on links that
	// are already integrity-protected (TLS) or trusted; headers are always checksummed, and a
	// receiver verifies every frame that carries a checksum whatever its own setting.
	Checksum bool
	// MaxMessage is the largest payload, raw or on the wire, that a frame may carry. A Send of
	// more fails; an incoming frame announcing more poisons the connection. At most MaxFrameLen;
	// 0 means the default (1 GiB).
	MaxMessage int
	// ReadBuffer is the size of each connection's read buffer. Frames smaller than it are read
	// in batches; larger payloads go from the socket straight to their destination. 0 means the
	// default (64 KiB).
	ReadBuffer int
	// SocketBuffer, when positive, sets the kernel send and receive buffers of connections that
	// support it (TCP and Unix sockets) to this many bytes, capped by the system's maximum
	// (net.core.wmem_max / rmem_max). Larger buffers let a sender run ahead of its receiver;
	// Unix sockets default to about 200 KiB. 0 leaves the system default (and, for TCP, its
	// autotuning).
	SocketBuffer int
	// Linger, when positive, makes Close half-close every connection and wait up to this long
	// for each peer to half-close too, so that frames already sent are read before the links go
	// down (a libp2p stream, or a socket with unread data, is reset by a plain close). Jobs set
	// it (transport/p2p does); 0 closes at once.
	Linger time.Duration
	// Poll, when positive, lets a receiver that waits on a socket peer (TCP or Unix, on Linux)
	// or a transport/shm pipe poll that connection for up to this long, yielding the CPU
	// between looks, and read its message itself once the whole frame has arrived, instead of
	// sleeping until the connection's reader goroutine wakes it. A sleeping thread takes tens of microseconds to wake on a loaded or
	// virtualized host, twice per message (the reader, then the receiver); polling takes both
	// wake-ups off the path of small messages, as the progress loops of MPI libraries do. 0
	// means receivers always sleep.
	Poll time.Duration
	// LendMin is the smallest uncompressed payload that a transport/shm pipe lends in place to
	// a RecvBorrow already waiting for it (see "Lent payloads" in the package documentation):
	// the collective reduces the segment straight out of the pipe's ring, one copy fewer.
	// Smaller payloads go through the endpoint's read buffer, like a socket's, where one read
	// of the pipe serves many frames. 0 means DefaultLendMin; negative: nothing is lent.
	LendMin int
}

// DefaultLendMin is the payload size from which shared-memory pipes lend (StreamOptions.LendMin):
// from there on the saved copy outweighs reading the frame from the pipe without the read
// buffer (docs/results/shm-path.md).
const DefaultLendMin = 256 << 10

// DefaultStreamOptions returns checksums on, 1 GiB messages and 64 KiB read buffers.
func DefaultStreamOptions() StreamOptions {
	return StreamOptions{Checksum: true, MaxMessage: 1 << 30, ReadBuffer: 64 << 10}
}

// Validate reports the first invalid option.
func (o StreamOptions) Validate() error {
	if o.MaxMessage < 0 || o.MaxMessage > MaxFrameLen {
		return fmt.Errorf("stream options: MaxMessage %d out of range [0, %d] (0 = default)", o.MaxMessage, MaxFrameLen)
	}
	if o.Linger < 0 {
		return fmt.Errorf("stream options: Linger %v is negative", o.Linger)
	}
	if o.SocketBuffer < 0 || o.SocketBuffer > 1<<30 {
		return fmt.Errorf("stream options: SocketBuffer %d out of range [0, %d]", o.SocketBuffer, 1<<30)
	}
	if o.ReadBuffer != 0 && (o.ReadBuffer < 16 || o.ReadBuffer > 64<<20) {
		return fmt.Errorf("stream options: ReadBuffer %d out of range [16, %d] (0 = default)", o.ReadBuffer, 64<<20)
	}
	return nil
}

// NewStreamEndpoint returns rank's endpoint in a job of size ranks that talks to each peer over
// conns[peer], a duplex byte stream (TCP or Unix connection, libp2p stream, net.Pipe).
// conns[rank] must be nil: messages to self go through an in-process queue. The endpoint owns
// the connections from now on and closes them in Close. It starts one reader goroutine per
// connection.
func NewStreamEndpoint(rank, size int, conns []io.ReadWriteCloser, opts StreamOptions) (Endpoint, error) {
	if size <= 0 {
		return nil, fmt.Errorf("stream endpoint: job size %d must be positive", size)
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("stream endpoint: rank %d out of range [0, %d)", rank, size)
	}
	if len(conns) != size {
		return nil, fmt.Errorf("stream endpoint: rank %d: %d connections for a job of %d ranks", rank, len(conns), size)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("stream endpoint: rank %d: %w", rank, err)
	}
	def := DefaultStreamOptions()
	if opts.MaxMessage == 0 {
		opts.MaxMessage = def.MaxMessage
	}
	if opts.ReadBuffer == 0 {
		opts.ReadBuffer = def.ReadBuffer
	}
	for peer, c := range conns {
		if peer == rank && c != nil {
			return nil, fmt.Errorf("stream endpoint: rank %d: conns[%d] must be nil (messages to self stay in process)", rank, peer)
		}
		if peer != rank && c == nil {
			return nil, fmt.Errorf("stream endpoint: rank %d: no connection to rank %d", rank, peer)
		}
	}
	e := &streamEndpoint{
		rank:   rank,
		size:   size,
		opts:   opts,
		tab:    crcTable(),
		peers:  make([]*streamPeer, size),
		self:   make(map[Channel]*mailbox),
		closed: make(chan struct{}),
	}
	for peer, c := range conns {
		if peer == rank {
			continue
		}
		var r io.Reader = c
		raw := newRawSock(c)
		if raw != nil {
			r = raw
		}
		p := &streamPeer{
			ep:      e,
			peer:    peer,
			conn:    c,
			raw:     raw,
			br:      bufio.NewReaderSize(r, opts.ReadBuffer),
			inboxes: make(map[Channel]*inbox),
			wcodec:  NewPayloadCodec(opts.MaxMessage),
			rcodec:  NewPayloadCodec(opts.MaxMessage),
		}
		_, p.vectored = c.(net.Conn)
		p.lend, p.lendMin = lenderOf(c, opts.LendMin)
		if opts.Poll > 0 {
			p.sock = newPoller(c)
		}
		if opts.SocketBuffer > 0 {
			if sb, ok := c.(interface {
				SetReadBuffer(int) error
				SetWriteBuffer(int) error
			}); ok {
				// Best effort: a refusal leaves the system default, which still works.
				sb.SetReadBuffer(opts.SocketBuffer)
				sb.SetWriteBuffer(opts.SocketBuffer)
			}
		}
		p.rdl, _ = c.(interface{ SetReadDeadline(time.Time) error })
		p.wdl, _ = c.(interface{ SetWriteDeadline(time.Time) error })
		e.peers[peer] = p
	}
	for _, p := range e.peers {
		if p != nil {
			e.wg.Add(1)
			go p.readLoop()
		}
	}
	return e, nil
}

type streamEndpoint struct {
	rank, size int
	opts       StreamOptions
	tab        *crc32.Table
	peers      []*streamPeer // nil at rank
	pool       bufPool

	selfMu sync.Mutex
	self   map[Channel]*mailbox

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	stats struct {
		msgsSent, msgsRecv, bytesSent, bytesRecv, wireSent, wireRecv atomic.Uint64
	}
	polled atomic.Uint64 // frames read by polling receivers (tests look at it)
	lent   atomic.Uint64 // payloads queued lent by their connection (tests look at it)
}

// streamPeer is the link to one peer: a write side guarded by wmu and a read side owned by the
// reader goroutine, which hands frames over under mu.
type streamPeer struct {
	ep       *streamEndpoint
	peer     int
	conn     io.ReadWriteCloser
	vectored bool // conn is a net.Conn: header and payload go out in one writev
	rdl      interface{ SetReadDeadline(time.Time) error }
	wdl      interface{ SetWriteDeadline(time.Time) error }
	// raw reads and writes conn's socket with raw system calls, nil when conn is not a
	// socket (rawio_linux.go): every read and frame goes through it then.
	raw *rawSock

	wmu       sync.Mutex
	whdr      [FrameHeaderSize]byte
	wvec      [2][]byte
	wbufs     net.Buffers
	wenc      []byte // encoded payload scratch
	wsmall    []byte // header+payload scratch for small frames on non-vectored conns
	wcodec    *PayloadCodec
	wdeadline time.Time // write deadline currently set on conn
	werr      error     // sticky: a frame went out partially, the stream is unusable

	// sock is non-nil when receivers may poll this connection (StreamOptions.Poll on a
	// socket or a transport/shm pipe). Then the fields below belong to whoever holds rtok: the reader goroutine while
	// it reads a frame, or a polling receiver; nobody holds rtok while waiting for data.
	sock poller
	rtok sync.Mutex
	dead atomic.Bool // the read side failed: the reader goroutine stops

	// reader goroutine only (or the holder of rtok, see sock)
	br *bufio.Reader
	// lend is the connection when it lends payloads of lendMin bytes or more in place.
	lend    lender
	lendMin int
	rhdr    [FrameHeaderSize]byte
	rwire   []byte
	rcodec  *PayloadCodec

	mu      sync.Mutex
	inboxes map[Channel]*inbox
	err     error // sticky read-side error, returned by every Recv once the queue is drained
	// queuedLends counts the queued messages whose payload is lent by the connection.
	queuedLends int
}

// inbox is the FIFO of one (peer, channel) plus the single receiver that may wait on it.
type inbox struct {
	queue []pending
	head  int
	w     waiter
	// borrowed is the pooled buffer RecvBorrow handed out, until ReleaseBorrowed; lent the
	// connection's bytes it handed out instead.
	borrowed *pooledBuf
	lent     []byte
}

// pending is a queued message: its payload is in buf, or lent by the connection (lent).
type pending struct {
	h    Header
	buf  *pooledBuf
	lent []byte
	n    int
}

func (ib *inbox) push(m pending) {
	if ib.head > 0 && ib.head == len(ib.queue) {
		ib.queue = ib.queue[:0]
		ib.head = 0
	}
	ib.queue = append(ib.queue, m)
}

func (ib *inbox) pop() (pending, bool) {
	if ib.head == len(ib.queue) {
		return pending{}, false
	}
	m := ib.queue[ib.head]
	ib.queue[ib.head] = pending{}
	ib.head++
	return m, true
}

func (ib *inbox) empty() bool { return ib.head == len(ib.queue) }

// Receiver states. Only the receiver moves idle→posted, posted→idle (on cancellation),
// filling→aborting and done→idle; only the reader moves posted→filling→done,
// posted→decoding→done and posted→idle (message queued or link failed), and it sends one wake
// for each of its moves out of posted, filling, aborting or decoding.
const (
	wIdle     = iota
	wPosted   // a Recv waits with buf
	wFilling  // the reader is reading the payload straight into buf
	wAborting // the Recv was cancelled while the reader was filling buf
	wDecoding // the reader is decoding an encoded payload into buf
	wDone     // buf holds the message described by h and n
)

type waiter struct {
	state    int
	buf      []byte
	want     Header
	matchAny bool
	borrow   bool // a RecvBorrow: it takes the payload where it lies
	h        Header
	n        int
	wake     chan struct{}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// inbox returns the inbox of channel ch; p.mu must be held.
func (p *streamPeer) inbox(ch Channel) *inbox {
	ib := p.inboxes[ch]
	if ib == nil {
		ib = &inbox{w: waiter{wake: make(chan struct{}, 1)}}
		p.inboxes[ch] = ib
	}
	return ib
}

func (e *streamEndpoint) Rank() int { return e.rank }
func (e *streamEndpoint) Size() int { return e.size }

func (e *streamEndpoint) Stats() Stats {
	return Stats{
		MsgsSent: e.stats.msgsSent.Load(), MsgsRecv: e.stats.msgsRecv.Load(),
		BytesSent: e.stats.bytesSent.Load(), BytesRecv: e.stats.bytesRecv.Load(),
		WireBytesSent: e.stats.wireSent.Load(), WireBytesRecv: e.stats.wireRecv.Load(),
	}
}

func (e *streamEndpoint) isClosed() bool {
	select {
	case <-e.closed:
		return true
	default:
		return false
	}
}

// Close closes every connection, waits for the reader goroutines and fails blocked calls.
func (e *streamEndpoint) Close() error {
	e.closeOnce.Do(func() {
		close(e.closed)
		e.linger()
		for _, p := range e.peers {
			if p != nil {
				p.conn.Close()
			}
		}
		e.wg.Wait()
		for _, p := range e.peers {
			if p != nil {
				p.unlendQueued()
				p.wmu.Lock()
				p.wcodec.Close()
				p.wmu.Unlock()
				p.rcodec.Close()
			}
		}
	})
	return nil
}

// linger half-closes every connection that supports it and waits, at most opts.Linger, until
// every peer has half-closed too (its reader saw the end of the stream). A plain Close would
// reset a libp2p stream (and a socket with unread data) while frames this rank already sent are
// still in flight, and the peer would lose the job's last messages. A peer that is busy writing
// keeps its lock: that link is closed hard after the wait.
func (e *streamEndpoint) linger() {
	if e.opts.Linger <= 0 {
		return
	}
	type closeWriter interface{ CloseWrite() error }
	any := false
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		cw, ok := p.conn.(closeWriter)
		if !ok || !p.wmu.TryLock() {
			continue
		}
		if cw.CloseWrite() == nil {
			any = true
		}
		p.wmu.Unlock()
	}
	if !any {
		return
	}
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(e.opts.Linger)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// ---- send ----

func (e *streamEndpoint) Send(ctx context.Context, to int, h Header, payload []byte) error {
	if err := checkPeer(e.rank, e.size, to, "send"); err != nil {
		return err
	}
	if e.isClosed() {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: errEndpointClosed}
	}
	if err := ctx.Err(); err != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	if !h.Codec.Known() {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: fmt.Errorf("unknown codec %d", h.Codec)}
	}
	if len(payload) > e.opts.MaxMessage {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(),
			Err: fmt.Errorf("payload of %d bytes exceeds the %d-byte message limit", len(payload), e.opts.MaxMessage)}
	}
	if to == e.rank {
		return e.sendSelf(h, payload)
	}
	p := e.peers[to]
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.werr != nil {
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: p.werr}
	}
	wire := payload
	if h.Codec != CodecNone && len(payload) > 0 {
		enc, err := p.wcodec.Encode(h.Codec, p.wenc, payload)
		if err != nil {
			return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
		}
		p.wenc = enc
		wire = enc
		if len(wire) > e.opts.MaxMessage {
			return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(),
				Err: fmt.Errorf("%v payload of %d bytes exceeds the %d-byte message limit", h.Codec, len(wire), e.opts.MaxMessage)}
		}
	}
	f := FrameHeader{Header: h, RawLen: uint32(len(payload)), WireLen: uint32(len(wire))}
	if e.opts.Checksum {
		f.Flags |= FlagChecksum
		f.PayloadCRC = crc32.Checksum(wire, e.tab)
	}
	MarshalFrameHeader(p.whdr[:], &f, e.tab)

	var stop func() bool
	var interrupted chan struct{} // closed once the cancellation handler has moved the deadline
	if p.wdl != nil {
		if dl, ok := ctx.Deadline(); ok {
			if !dl.Equal(p.wdeadline) {
				p.wdl.SetWriteDeadline(dl)
				p.wdeadline = dl
			}
		} else {
			if !p.wdeadline.IsZero() {
				p.wdl.SetWriteDeadline(time.Time{})
				p.wdeadline = time.Time{}
			}
			if ctx.Done() != nil {
				// Cancellable without a deadline: interrupt the write when it is cancelled.
				// This allocates; contexts with deadlines (or none) do not.
				interrupted = make(chan struct{})
				stop = context.AfterFunc(ctx, func() {
					p.wdl.SetWriteDeadline(time.Unix(1, 0))
					close(interrupted)
				})
			}
		}
	}
	n, err := p.writeFrame(wire)
	if stop != nil && !stop() {
		// The cancellation fired and moved the deadline; put it back once the handler is done
		// (it may still be running, and its past deadline landing after this reset would fail
		// the next write on the connection).
		<-interrupted
		p.wdl.SetWriteDeadline(time.Time{})
		p.wdeadline = time.Time{}
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The write deadline can fire a moment before the context's own timer.
			if ctx.Err() != nil {
				err = ctx.Err()
			} else if _, ok := ctx.Deadline(); ok {
				err = context.DeadlineExceeded
			}
		}
		if e.isClosed() {
			err = errEndpointClosed
		} else if ferr := p.failure(); ferr != nil {
			// The peer was failed (its heartbeats stopped, its stream broke) and its
			// connection closed: say why, rather than "use of closed network connection".
			err = ferr
		}
		if n > 0 {
			// Part of the frame is on the wire: the stream is out of step for good. Close it
			// so that the peer sees a truncated stream instead of waiting for the rest.
			p.werr = fmt.Errorf("connection unusable after a partial frame: %w", err)
			p.conn.Close()
		}
		return &PeerError{Rank: e.rank, Peer: to, Op: "send " + h.String(), Err: err}
	}
	e.stats.msgsSent.Add(1)
	e.stats.bytesSent.Add(uint64(len(payload)))
	e.stats.wireSent.Add(uint64(FrameHeaderSize + len(wire)))
	return nil
}

// smallFrame is the payload size up to which a frame on a non-vectored connection is copied
// into one buffer and written with one call.
const smallFrame = 32 << 10

// writeFrame writes p.whdr and wire; p.wmu must be held. It returns how many bytes went out.
func (p *streamPeer) writeFrame(wire []byte) (int64, error) {
	if p.raw != nil {
		return p.raw.writeFrame(p.whdr[:], wire)
	}
	if p.vectored {
		p.wvec[0] = p.whdr[:]
		p.wvec[1] = wire
		p.wbufs = p.wvec[:]
		if len(wire) == 0 {
			p.wbufs = p.wvec[:1]
		}
		n, err := p.wbufs.WriteTo(p.conn)
		p.wvec[0], p.wvec[1], p.wbufs = nil, nil, nil
		return n, err
	}
	if len(wire) <= smallFrame {
		p.wsmall = append(append(p.wsmall[:0], p.whdr[:]...), wire...)
		n, err := p.conn.Write(p.wsmall)
		return int64(n), err
	}
	n, err := p.conn.Write(p.whdr[:])
	if err != nil {
		return int64(n), err
	}
	m, err := p.conn.Write(wire)
	return int64(n + m), err
}

func (e *streamEndpoint) selfBox(ch Channel) *mailbox {
	e.selfMu.Lock()
	defer e.selfMu.Unlock()
	b := e.self[ch]
	if b == nil {
		b = &mailbox{signal: make(chan struct{}, 1)}
		e.self[ch] = b
	}
	return b
}

func (e *streamEndpoint) sendSelf(h Header, payload []byte) error {
	data, err := memRoundTrip(h.Codec, payload)
	if err != nil {
		return &PeerError{Rank: e.rank, Peer: e.rank, Op: "send " + h.String(), Err: err}
	}
	e.stats.msgsSent.Add(1) // before delivery, as memEndpoint.Send counts
	e.stats.bytesSent.Add(uint64(len(payload)))
	e.selfBox(h.Channel).put(memMsg{h: h, payload: data})
	return nil
}

// ---- receive ----

func (e *streamEndpoint) Recv(ctx context.Context, from int, want Header, buf []byte) (int, error) {
	got, n, err := e.recv(ctx, from, want, false, buf)
	if err != nil {
		return 0, err
	}
	if err := CheckHeader(e.rank, from, want, got); err != nil {
		return 0, err
	}
	return n, nil
}

func (e *streamEndpoint) RecvAny(ctx context.Context, from int, ch Channel, buf []byte) (Header, int, error) {
	return e.recv(ctx, from, Header{Channel: ch}, true, buf)
}

// Borrower is implemented by endpoints that can lend a received message's payload instead of
// copying it into a caller's buffer. The collectives use it for segments they reduce: the
// payload is read once from the socket into a pooled buffer and reduced from there, while the
// endpoint's reader already reads the next segment; on a shared-memory pipe, a payload of
// StreamOptions.LendMin bytes or more is not copied out at all, and the collective reduces it where it lies
// in the pipe's ring.
type Borrower interface {
	// RecvBorrow receives the next message from `from` on channel ch, like RecvAny, and returns
	// its header and payload. The payload belongs to the endpoint, is read-only and may be
	// unaligned, and stays valid until ReleaseBorrowed(from, ch) or the next RecvBorrow on the
	// same peer and channel, which releases it implicitly. Release it before waiting for
	// another message from the same peer: a payload lent from a pipe's ring keeps the peer
	// from writing over it, and the peer may need that room for the message waited for.
	RecvBorrow(ctx context.Context, from int, ch Channel) (Header, []byte, error)
	// ReleaseBorrowed gives the payload of the last RecvBorrow from (from, ch) back.
	ReleaseBorrowed(from int, ch Channel)
}

var _ Borrower = (*streamEndpoint)(nil)

func (e *streamEndpoint) RecvBorrow(ctx context.Context, from int, ch Channel) (Header, []byte, error) {
	if err := checkPeer(e.rank, e.size, from, "recv"); err != nil {
		return Header{}, nil, err
	}
	if from == e.rank {
		m, err := e.selfBox(ch).take(ctx, e.closed, nil)
		if err != nil {
			return Header{}, nil, e.recvErr(e.rank, ch, err)
		}
		e.stats.msgsRecv.Add(1)
		e.stats.bytesRecv.Add(uint64(len(m.payload)))
		return m.h, m.payload, nil
	}
	e.ReleaseBorrowed(from, ch)
	h, _, m, err := e.recvMsg(ctx, from, Header{Channel: ch}, true, nil, true)
	if err != nil {
		return h, nil, err
	}
	p := e.peers[from]
	switch {
	case m.lent != nil:
		p.mu.Lock()
		p.inbox(ch).lent = m.lent
		p.mu.Unlock()
		return h, m.lent, nil
	case m.buf != nil:
		p.mu.Lock()
		p.inbox(ch).borrowed = m.buf
		p.mu.Unlock()
		return h, m.buf.b[:m.n], nil
	}
	return h, nil, nil
}

func (e *streamEndpoint) ReleaseBorrowed(from int, ch Channel) {
	if from < 0 || from >= e.size || from == e.rank {
		return
	}
	p := e.peers[from]
	p.mu.Lock()
	ib := p.inboxes[ch]
	var (
		pb   *pooledBuf
		lent []byte
	)
	if ib != nil {
		pb, ib.borrowed = ib.borrowed, nil
		lent, ib.lent = ib.lent, nil
	}
	p.mu.Unlock()
	e.pool.put(pb)
	if lent != nil {
		p.lend.Return(lent)
	}
}

func (e *streamEndpoint) recvErr(from int, ch Channel, err error) error {
	return &PeerError{Rank: e.rank, Peer: from, Op: fmt.Sprintf("recv on channel %d", ch), Err: err}
}

func (e *streamEndpoint) recv(ctx context.Context, from int, want Header, matchAny bool, buf []byte) (Header, int, error) {
	if err := checkPeer(e.rank, e.size, from, "recv"); err != nil {
		return Header{}, 0, err
	}
	if from == e.rank {
		return e.recvSelf(ctx, want.Channel, buf)
	}
	h, n, _, err := e.recvMsg(ctx, from, want, matchAny, buf, false)
	return h, n, err
}

// recvMsg waits for the next message from `from` on want.Channel. With borrow=false it lands in
// buf (directly from the socket when the receiver is waiting first); with borrow=true buf is
// nil, and a queued message is returned as it is, pooled buffer and all, for the caller to own.
// A borrowed empty message comes back as a zero pending.
func (e *streamEndpoint) recvMsg(ctx context.Context, from int, want Header, matchAny bool, buf []byte, borrow bool) (Header, int, pending, error) {
	p := e.peers[from]
	p.mu.Lock()
	ib := p.inbox(want.Channel)
	w := &ib.w
	for {
		if m, ok := ib.pop(); ok {
			if m.lent != nil {
				p.queuedLends--
			}
			p.mu.Unlock()
			if borrow {
				if m.buf == nil && m.lent == nil {
					return m.h, 0, pending{}, nil
				}
				return m.h, m.n, m, nil
			}
			h, n, err := e.take(from, m, buf)
			return h, n, pending{}, err
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return Header{}, 0, pending{}, err
		}
		if w.state != wIdle {
			p.mu.Unlock()
			return Header{}, 0, pending{}, e.recvErr(from, want.Channel,
				errors.New("another Recv is already waiting on this peer and channel"))
		}
		if err := ctx.Err(); err != nil {
			p.mu.Unlock()
			return Header{}, 0, pending{}, e.recvErr(from, want.Channel, err)
		}
		w.state, w.buf, w.want, w.matchAny, w.borrow = wPosted, buf, want, matchAny, borrow
		p.mu.Unlock()
		if p.sock != nil {
			p.poll(ctx, w)
		}

		select {
		case <-w.wake:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			switch w.state {
			case wPosted:
				w.state, w.buf = wIdle, nil
				p.mu.Unlock()
				return Header{}, 0, pending{}, e.recvErr(from, want.Channel, ctx.Err())
			case wFilling:
				// The reader is writing into buf; stop it before buf goes back to the caller.
				w.state = wAborting
				p.interruptRead()
			}
			p.mu.Unlock()
			<-w.wake
			p.mu.Lock()
			if w.state != wDone {
				p.mu.Unlock()
				return Header{}, 0, pending{}, e.recvErr(from, want.Channel, ctx.Err())
			}
		}
		if w.state == wDone {
			h, n := w.h, w.n
			w.state, w.buf = wIdle, nil
			p.mu.Unlock()
			return h, n, pending{}, nil
		}
		// Woken because a message was queued or the link failed: look again.
	}
}

// interruptRead makes the reader's blocked Read return; p.mu must be held.
func (p *streamPeer) interruptRead() {
	if p.rdl != nil && p.rdl.SetReadDeadline(time.Unix(1, 0)) == nil {
		return
	}
	// No deadlines on this connection: closing it is the only way to stop the read.
	if p.err == nil {
		p.err = &PeerError{Rank: p.ep.rank, Peer: p.peer, Op: "recv",
			Err: errors.New("connection closed: a Recv was cancelled in the middle of a message and the connection has no read deadlines")}
	}
	p.conn.Close()
}

// take copies a queued message into buf and recycles its buffer.
func (e *streamEndpoint) take(from int, m pending, buf []byte) (Header, int, error) {
	defer e.pool.put(m.buf)
	if m.lent != nil {
		defer e.peers[from].lend.Return(m.lent)
	}
	if m.n > len(buf) {
		return m.h, 0, &PeerError{Rank: e.rank, Peer: from, Op: "recv " + m.h.String(),
			Err: fmt.Errorf("message of %d bytes does not fit the %d-byte buffer", m.n, len(buf))}
	}
	src := m.lent
	if m.buf != nil {
		src = m.buf.b[:m.n]
	}
	return m.h, copy(buf, src), nil
}

func (e *streamEndpoint) recvSelf(ctx context.Context, ch Channel, buf []byte) (Header, int, error) {
	m, err := e.selfBox(ch).take(ctx, e.closed, nil)
	if err != nil {
		return Header{}, 0, e.recvErr(e.rank, ch, err)
	}
	if len(m.payload) > len(buf) {
		return m.h, 0, &PeerError{Rank: e.rank, Peer: e.rank, Op: "recv " + m.h.String(),
			Err: fmt.Errorf("message of %d bytes does not fit the %d-byte buffer", len(m.payload), len(buf))}
	}
	n := copy(buf, m.payload)
	e.stats.msgsRecv.Add(1)
	e.stats.bytesRecv.Add(uint64(n))
	return m.h, n, nil
}

// ---- reader goroutine ----

// readChunk bounds how much payload is read between checksum updates, so the checksum runs
// over bytes that are still in cache.
const readChunk = 512 << 10

func (p *streamPeer) readLoop() {
	defer p.ep.wg.Done()
	if p.sock != nil {
		p.pollingReadLoop()
		return
	}
	for {
		if err := p.readFrame(); err != nil {
			p.fail(err)
			return
		}
	}
}

// pollingReadLoop is the reader of a connection that receivers may poll: it waits for data
// without holding rtok, so that a polling receiver can read frames meanwhile, and holds rtok
// only while it reads one frame.
func (p *streamPeer) pollingReadLoop() {
	// arrived: the last wait found bytes (or the end of the stream), and no receiver has read
	// a frame since, so they are still there: read without looking again. polledAt is the
	// endpoint's count of polled frames when the wait began.
	eof, arrived := false, false
	var polledAt uint64
	for !p.dead.Load() {
		p.rtok.Lock()
		if p.dead.Load() {
			p.rtok.Unlock()
			return
		}
		if arrived && p.ep.polled.Load() != polledAt {
			arrived = false // a receiver read frames meanwhile: perhaps these bytes too
		}
		if !eof && !arrived && p.buffered() == 0 {
			// Wait without rtok, so that receivers may poll meanwhile. The wait returns at
			// once when bytes are already there.
			polledAt = p.ep.polled.Load()
			p.rtok.Unlock()
			if err := p.sock.waitReadable(); err != nil {
				p.fail(p.readErr(err, "between frames"))
				return
			}
			eof, arrived = p.sock.atEOF(), true
			continue
		}
		eof, arrived = false, false
		if err := p.readFrame(); err != nil {
			// Fail before another reader may take rtok: the failed frame's bytes are
			// consumed, and a poller reading on would deliver the frames after it (or read
			// out of sync) instead of the failure.
			p.fail(err)
			p.rtok.Unlock()
			return
		}
		p.rtok.Unlock()
	}
}

// poll is a receiver's wait before it sleeps: for up to Poll, it reads every frame that has
// fully arrived on the socket itself (its own goes straight into its buffer and signals w, as
// the reader goroutine would do), yielding the CPU between looks. It returns when w was
// signalled, ctx ended, the time is up, or the read side failed.
func (p *streamPeer) poll(ctx context.Context, w *waiter) {
	until := time.Now().Add(p.ep.opts.Poll)
	for len(w.wake) == 0 && !p.dead.Load() {
		if p.rtok.TryLock() {
			for len(w.wake) == 0 && !p.dead.Load() {
				ready, streaming, err := p.frameArrived()
				if streaming {
					// A large frame is coming in: the reader goroutine streams it into place
					// as it arrives, while polling would wait for all of it.
					p.rtok.Unlock()
					return
				}
				if err == nil && ready {
					err = p.readFrame()
					p.ep.polled.Add(1)
				}
				if err != nil {
					p.fail(err) // under rtok, as in pollingReadLoop
					p.rtok.Unlock()
					return
				}
				if !ready {
					break
				}
			}
			p.rtok.Unlock()
		}
		if len(w.wake) != 0 || ctx.Err() != nil || time.Now().After(until) {
			return
		}
		runtime.Gosched()
		yieldCPU()
	}
}

// poller looks at a connection without reading it, so that receivers may poll it (StreamOptions.Poll):
// sockets on Linux (sockPoll) and connections that count their unread bytes and wait for some
// without taking them, such as transport/shm's pipes (readWaiter).
type poller interface {
	// inq returns how many bytes wait to be read.
	inq() (int, error)
	// waitReadable parks until bytes wait (or the stream ended: atEOF) without reading any.
	waitReadable() error
	atEOF() bool
}

// readWaiter is a connection that can say how many bytes wait and wait for some without
// taking them (transport/shm.Pipe).
type readWaiter interface {
	Buffered() int
	WaitReadable() (eof bool, err error)
}

type waiterPoll struct {
	c   readWaiter
	eof bool
}

func (w *waiterPoll) inq() (int, error) { return w.c.Buffered(), nil }
func (w *waiterPoll) atEOF() bool       { return w.eof }
func (w *waiterPoll) waitReadable() (err error) {
	w.eof, err = w.c.WaitReadable()
	return err
}

// newPoller returns the poller of c, or nil when c cannot be polled.
func newPoller(c io.ReadWriteCloser) poller {
	if rw, ok := c.(readWaiter); ok {
		return &waiterPoll{c: rw}
	}
	if s := newSockPoll(c); s != nil {
		return s
	}
	return nil
}

// pollFrameMax is the largest frame a polling receiver waits to arrive whole; a larger one that
// has started to arrive is left to the reader goroutine. It counts the header on top of a
// 64 KiB payload: a frame over smallFrame is written as its header and then its payload, so a
// poller often sees the header alone first, and the 64 KiB messages of recursive doubling
// (auto's choice at 64 KiB up to 32 ranks) would otherwise each wake the reader goroutine.
const pollFrameMax = 64<<10 + FrameHeaderSize

// frameArrived reports whether a whole frame is buffered or waiting in the socket, so that
// readFrame will not block, or else whether a frame larger than pollFrameMax is arriving.
// rtok must be held.
func (p *streamPeer) frameArrived() (ready, streaming bool, err error) {
	q, err := p.sock.inq()
	if err != nil {
		return false, false, nil // the reader goroutine reports the connection's state
	}
	avail := p.buffered() + q
	if avail < FrameHeaderSize {
		return false, false, nil
	}
	hdr, err := p.peekHeader()
	if hdr == nil || err != nil {
		return false, false, err
	}
	e := p.ep
	f, err := DecodeFrameHeader(e.rank, p.peer, hdr, e.opts.MaxMessage, e.tab)
	if err != nil {
		return true, false, nil // readFrame reports the bad header
	}
	size := FrameHeaderSize + int(f.WireLen)
	if avail >= size {
		return true, false, nil
	}
	return false, size > pollFrameMax, nil
}

// fail poisons the read side: queued messages stay deliverable, every later Recv gets err.
// failure is the error the peer was failed with, nil while it is alive.
func (p *streamPeer) failure() error {
	if !p.dead.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *streamPeer) fail(err error) {
	e := p.ep
	var fe *FrameError
	if e.isClosed() && !errors.As(err, &fe) {
		err = &PeerError{Rank: e.rank, Peer: p.peer, Op: "recv", Err: errEndpointClosed}
	}
	p.dead.Store(true)
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	var wake []*waiter
	for _, ib := range p.inboxes {
		if ib.w.state == wPosted {
			ib.w.state, ib.w.buf = wIdle, nil
			wake = append(wake, &ib.w)
		}
	}
	p.mu.Unlock()
	for _, w := range wake {
		w.signal()
	}
	if errors.As(err, &fe) {
		// Stop the peer from writing into a stream nobody reads; it sees the link close.
		p.conn.Close()
	}
}

// errClosedByPeer is a stream that ended cleanly: the peer closed it, or its process ended.
// Why is the liveness layer's to say (FailPeer), when it knows.
var errClosedByPeer = errors.New("connection closed by the peer")

func (p *streamPeer) readErr(err error, what string) error {
	e := p.ep
	switch {
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w (%s)", errClosedByPeer, what)
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("stream truncated in the middle of a frame (%s): %w", what, io.ErrUnexpectedEOF)
	}
	return &PeerError{Rank: e.rank, Peer: p.peer, Op: "recv", Err: err}
}

func (p *streamPeer) readFrame() error {
	e := p.ep
	if err := p.readHeader(); err != nil {
		what := "between frames"
		if errors.Is(err, io.ErrUnexpectedEOF) {
			what = "frame header"
		}
		return p.readErr(err, what)
	}
	f, err := DecodeFrameHeader(e.rank, p.peer, p.rhdr[:], e.opts.MaxMessage, e.tab)
	if err != nil {
		return err
	}
	n := int(f.RawLen)
	sum := f.Flags&FlagChecksum != 0

	p.mu.Lock()
	ib := p.inbox(f.Channel)
	w := &ib.w
	if f.Codec == CodecNone {
		if p.claimable(ib, &f) {
			// Zero copy: the payload goes from the socket into the waiting receiver's buffer.
			w.state = wFilling
			dst := w.buf[:n]
			p.mu.Unlock()
			return p.fillDirect(ib, &f, dst, 0, 0)
		}
		p.mu.Unlock()
		// Nobody waits yet: leave the payload where it lies when the connection lends it.
		if lent, err := p.lendPayload(&f); lent || err != nil {
			return err
		}
		// Else read into a pooled buffer, but look for a receiver between chunks, so that a
		// Recv posted while a large payload streams in gets the rest directly.
		pb := e.pool.get(n)
		off, crc := 0, uint32(0)
		for off < n {
			k, c, err := p.readPayload(pb.b[off:min(off+readChunk, n)], crc, sum)
			off, crc = off+k, c
			if err != nil {
				e.pool.put(pb)
				return p.payloadErr(err)
			}
			if off < n {
				p.mu.Lock()
				if p.claimable(ib, &f) {
					w.state = wFilling
					dst := w.buf[:n]
					p.mu.Unlock()
					copy(dst, pb.b[:off])
					e.pool.put(pb)
					return p.fillDirect(ib, &f, dst, off, crc)
				}
				p.mu.Unlock()
			}
		}
		if err := checkCRC(e.rank, p.peer, &f, crc); sum && err != nil {
			e.pool.put(pb)
			return err
		}
		p.enqueue(ib, &f, pb)
		return nil
	}
	p.mu.Unlock()

	// Encoded payload: read the wire bytes into the reader's own scratch, then decode straight
	// into a waiting receiver's buffer when there is one, else into a pooled buffer.
	wl := int(f.WireLen)
	if cap(p.rwire) < wl {
		p.rwire = make([]byte, wl)
	}
	wire := p.rwire[:wl]
	_, crc, err := p.readPayload(wire, 0, sum)
	if err == nil {
		err = checkCRC(e.rank, p.peer, &f, crc)
	}
	if err != nil {
		return p.payloadErr(err)
	}
	decodeErr := func(derr error) error {
		c := f
		return &FrameError{Rank: e.rank, Peer: p.peer, Header: &c, Reason: "payload does not decode: " + derr.Error()}
	}
	p.mu.Lock()
	if p.claimable(ib, &f) {
		// Decoding is bounded work, so a cancelled receiver simply waits for it.
		w.state = wDecoding
		dst := w.buf[:n]
		p.mu.Unlock()
		derr := p.rcodec.Decode(f.Codec, dst, wire)
		p.mu.Lock()
		if derr != nil {
			w.state = wPosted // fail wakes the receiver
			p.mu.Unlock()
			return decodeErr(derr)
		}
		p.countRecv(&f)
		w.state, w.buf, w.h, w.n = wDone, nil, f.Header, n
		p.mu.Unlock()
		w.signal()
		return nil
	}
	p.mu.Unlock()
	pb := e.pool.get(n)
	if derr := p.rcodec.Decode(f.Codec, pb.b[:n], wire); derr != nil {
		e.pool.put(pb)
		return decodeErr(derr)
	}
	p.enqueue(ib, &f, pb)
	return nil
}

// claimable reports whether the frame f may go straight into the buffer of the receiver
// waiting on ib: it is waiting, nothing is queued before f, f fits and is what it expects.
// p.mu must be held.
func (p *streamPeer) claimable(ib *inbox, f *FrameHeader) bool {
	w := &ib.w
	return w.state == wPosted && ib.empty() && len(w.buf) >= int(f.RawLen) &&
		(w.matchAny || CheckHeader(p.ep.rank, p.peer, w.want, f.Header) == nil)
}

// fillDirect reads the rest of an uncompressed payload into dst, the buffer of the receiver
// waiting on ib, whose first off bytes (with checksum crc so far) are already there. The
// receiver is in state wFilling. If it gives up meanwhile, the message moves to a pooled buffer
// and stays queued for the next Recv.
func (p *streamPeer) fillDirect(ib *inbox, f *FrameHeader, dst []byte, off int, crc uint32) error {
	e := p.ep
	w := &ib.w
	n := len(dst)
	sum := f.Flags&FlagChecksum != 0
	got, crc, err := p.readPayload(dst[off:], crc, sum)
	got += off
	if err == nil && sum {
		err = checkCRC(e.rank, p.peer, f, crc)
	}
	p.mu.Lock()
	aborting := w.state == wAborting
	if aborting && p.rdl != nil {
		p.rdl.SetReadDeadline(time.Time{})
	}
	if err == nil {
		p.countRecv(f)
		w.state, w.buf, w.h, w.n = wDone, nil, f.Header, n
		p.mu.Unlock()
		w.signal()
		return nil
	}
	var ne net.Error
	if !aborting || !errors.As(err, &ne) || !ne.Timeout() {
		// Let fail wake the receiver.
		w.state = wPosted
		p.mu.Unlock()
		return p.payloadErr(err)
	}
	// The receiver gave up; keep the message for the next Recv. Save what is already in its
	// buffer before letting it go, then read the rest.
	pb := e.pool.get(n)
	copy(pb.b, dst[:got])
	w.state, w.buf = wIdle, nil
	p.mu.Unlock()
	w.signal()
	_, crc, err = p.readPayload(pb.b[got:n], crc, sum)
	if err == nil && sum {
		err = checkCRC(e.rank, p.peer, f, crc)
	}
	if err != nil {
		e.pool.put(pb)
		return p.payloadErr(err)
	}
	p.enqueue(ib, f, pb)
	return nil
}

func (p *streamPeer) payloadErr(err error) error {
	var fe *FrameError
	if errors.As(err, &fe) {
		return err
	}
	return p.readErr(err, "payload")
}

func (p *streamPeer) enqueue(ib *inbox, f *FrameHeader, pb *pooledBuf) {
	p.enqueuePending(ib, f, pending{h: f.Header, buf: pb, n: int(f.RawLen)})
}

// enqueuePending queues m, the message of frame f, and wakes the receiver waiting on ib.
func (p *streamPeer) enqueuePending(ib *inbox, f *FrameHeader, m pending) {
	p.countRecv(f)
	p.mu.Lock()
	ib.push(m)
	if m.lent != nil {
		p.queuedLends++
	}
	w := &ib.w
	wake := w.state == wPosted
	if wake {
		w.state, w.buf = wIdle, nil
	}
	p.mu.Unlock()
	if wake {
		w.signal()
	}
}

func (p *streamPeer) countRecv(f *FrameHeader) {
	s := &p.ep.stats
	s.msgsRecv.Add(1)
	s.bytesRecv.Add(uint64(f.RawLen))
	s.wireRecv.Add(uint64(FrameHeaderSize) + uint64(f.WireLen))
}

// readPayload fills dst from the stream, updating crc chunk by chunk. It returns the bytes
// read, also on error. sum=false skips the checksum.
func (p *streamPeer) readPayload(dst []byte, crc uint32, sum bool) (int, uint32, error) {
	tab := p.ep.tab
	if p.lend != nil {
		return p.readLender(dst, crc, sum)
	}
	if !sum {
		n, err := io.ReadFull(p.br, dst)
		return n, crc, err
	}
	off := 0
	for off < len(dst) {
		end := min(off+readChunk, len(dst))
		n, err := io.ReadFull(p.br, dst[off:end])
		crc = crc32.Update(crc, tab, dst[off:off+n])
		off += n
		if err != nil {
			return off, crc, err
		}
	}
	return off, crc, nil
}

// ---- buffer pool ----

// bufPool recycles payload buffers in power-of-two size classes from 4 KiB up.
type bufPool struct {
	classes [33]sync.Pool
}

type pooledBuf struct{ b []byte }

const minPoolClass = 12

func poolClass(n int) int {
	if n <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(n - 1))
}

func (bp *bufPool) get(n int) *pooledBuf {
	c := poolClass(n)
	if v := bp.classes[c].Get(); v != nil {
		pb := v.(*pooledBuf)
		pb.b = pb.b[:n]
		return pb
	}
	return &pooledBuf{b: make([]byte, n, 1<<c)}
}

func (bp *bufPool) put(pb *pooledBuf) {
	if pb == nil {
		return
	}
	c := poolClass(cap(pb.b))
	if 1<<c != cap(pb.b) {
		return
	}
	bp.classes[c].Put(pb)
}
