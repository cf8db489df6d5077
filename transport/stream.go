package transport

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetsync/hetsync/internal/rawsock"
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
	// sleeping until the connection's reader goroutine wakes it. A sleeping thread takes tens
	// of microseconds to wake on a loaded or virtualized host, twice per message (the reader,
	// then the receiver); polling takes both wake-ups off the path of small messages, as the
	// progress loops of MPI libraries do. 0 means receivers always sleep.
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
	return newStream(rank, size, conns, nil, opts)
}

// newStream is NewStreamEndpoint, and with dial NewDialingStreamEndpoint.
func newStream(rank, size int, conns []io.ReadWriteCloser, dial DialFunc, opts StreamOptions) (*streamEndpoint, error) {
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
	opts = streamDefaults(opts)
	for peer, c := range conns {
		if peer == rank && c != nil {
			return nil, fmt.Errorf("stream endpoint: rank %d: conns[%d] must be nil (messages to self stay in process)", rank, peer)
		}
		if peer != rank && c == nil && dial == nil {
			return nil, fmt.Errorf("stream endpoint: rank %d: no connection to rank %d", rank, peer)
		}
	}
	e := newStreamEndpoint(rank, size, opts)
	if dial != nil {
		e.lazy = newLazyLinks(dial)
	}
	for peer, c := range conns {
		if peer != rank && c != nil {
			e.peers[peer].Store(e.newPeer(peer, c))
		}
	}
	for i := range e.peers {
		if p := e.peers[i].Load(); p != nil {
			e.wg.Add(1)
			go p.readLoop()
		}
	}
	return e, nil
}

// streamDefaults fills the zero options of opts with their defaults.
func streamDefaults(opts StreamOptions) StreamOptions {
	def := DefaultStreamOptions()
	if opts.MaxMessage == 0 {
		opts.MaxMessage = def.MaxMessage
	}
	if opts.ReadBuffer == 0 {
		opts.ReadBuffer = def.ReadBuffer
	}
	return opts
}

func newStreamEndpoint(rank, size int, opts StreamOptions) *streamEndpoint {
	return &streamEndpoint{
		rank:   rank,
		size:   size,
		opts:   opts,
		tab:    crcTable(),
		peers:  make([]atomic.Pointer[streamPeer], size),
		self:   make(map[Channel]*mailbox),
		closed: make(chan struct{}),
	}
}

// newPeer builds the link to peer over c; its reader is not started yet.
func (e *streamEndpoint) newPeer(peer int, c io.ReadWriteCloser) *streamPeer {
	opts := e.opts
	var r io.Reader = c
	raw := rawsock.New(c)
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
	return p
}

type streamEndpoint struct {
	rank, size int
	opts       StreamOptions
	tab        *crc32.Table
	// peers are the links, each set once: from the start, or (an endpoint with a dialer,
	// stream_dial.go) when first dialed or accepted. Nil at rank.
	peers []atomic.Pointer[streamPeer]
	pool  bufPool
	// lazy is the dialing side of an endpoint that connects on first use; nil otherwise.
	lazy *lazyLinks

	selfMu sync.Mutex
	self   map[Channel]*mailbox

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	stats  traffic
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
	// socket (package rawsock): every read and frame goes through it then.
	raw *rawsock.Sock

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
	return e.stats.snapshot()
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
		if e.lazy != nil {
			e.lazy.close()
		}
		close(e.closed)
		e.linger()
		for i := range e.peers {
			if p := e.peers[i].Load(); p != nil {
				p.conn.Close()
			}
		}
		e.wg.Wait()
		for i := range e.peers {
			if p := e.peers[i].Load(); p != nil {
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
	for i := range e.peers {
		p := e.peers[i].Load()
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
