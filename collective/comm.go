package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hetsync/hetsync/transport"
)

// Comm is a communicator: the ranks of one Endpoint running collectives together. Its collective
// calls, blocking and non-blocking, run one at a time in the order they were issued, and every
// rank must issue the same collectives in the same order with the same arguments: issue them
// from one goroutine (or order them yourself), as several goroutines' calls reach the Comm in
// an order that differs from rank to rank.
type Comm struct {
	ep       transport.Endpoint
	base     transport.Endpoint // the job's endpoint: ep itself, or the one a subEndpoint maps to
	jobRanks []int              // rank of c -> rank of base; nil when they are the same
	chans    *channelAllocator  // sub-communicator channels, shared with every related Comm
	who      string             // "rank 3", or a sub-communicator rank with its job rank
	borrow   transport.Borrower // ep or an endpoint under it, when it lends received payloads
	opts     Options
	// largeSeg is the segment size of large calls (segmentFor); 0 when Options.SegmentBytes
	// was set or the endpoint has no preference.
	largeSeg int
	// chunk is the chunk size of a large allreduce (chunk.go); 0 when Options.SegmentBytes was
	// set, which asks for the algorithm's own schedule cut in such segments.
	chunk   int
	algName string
	sigAlg  string // algName as the op signature hashes it (sigAlgorithm)
	alg     algorithm
	replan  *replanner // nil when the Comm does not re-plan
	arena   *arenaColl // the job's arena (arena.go); nil when auto cannot use one

	closed atomic.Bool // Close was called: every later call fails with ErrClosed

	turns turns
	// Everything below belongs to the call that has the turn (see turns).
	broken             error
	cur                callDesc     // the running call, to name it in a mismatch
	dctx               deadlineCtx  // context of calls made with one that never ends
	recvPeer, sendPeer atomic.Int32 // peers the call is receiving from and sending to, -1 if none
	cache              map[schedKey]*schedule
	temp               []uint64 // pooled receive buffer for stepRecvReduce, 8-byte aligned

	// executor state, reused by every call
	sendsDone, recvsDone atomic.Int64
	sendSig, recvSig     chan struct{}
	senderDone           chan error
	cancelCall           context.CancelFunc
	zip                  zipState // the running allreduce's compression (compressed.go)
	bytesSent            atomic.Int64
	sentBy               *LinkCounter // bytesSent by class of link (linkbytes.go)
	watch                watchdog     // stall reports and the endpoint's activity record (watchdog.go)
	attr                 attribution  // who the calls waited for (attrib.go)

	// point-to-point messages, in order per peer and direction (see p2p.go)
	p2pMu            sync.Mutex
	p2pSend, p2pRecv []p2pLane
}

// ErrClosed is what every call on a Comm fails with, wrapped with the rank and the call, once
// Close was called on it (errors.Is(err, ErrClosed)).
var ErrClosed = errors.New("the Comm is closed")

// Close makes every later call on c, collective or point-to-point, fail at once with an error
// wrapping ErrClosed; a collective call after it also tells the peers that this rank is not
// coming, as any failure does. A call running when c closes that then fails says ErrClosed
// first. Close closes no endpoint: c's creator owns it (see New). It returns nil, also when
// called again.
func (c *Comm) Close() error {
	c.closed.Store(true)
	return nil
}

// New builds a communicator over ep. Every rank of ep belongs to it; Split makes smaller ones.
// New does not take ep over: ep's owner closes it.
func New(ep transport.Endpoint, opts Options) (*Comm, error) {
	if ep == nil {
		return nil, errors.New("collective: nil endpoint")
	}
	return newComm(ep, opts, ep, nil, newChannelAllocator(), fmt.Sprintf("rank %d", ep.Rank()))
}

func newComm(ep transport.Endpoint, opts Options, base transport.Endpoint, jobRanks []int, chans *channelAllocator, who string) (*Comm, error) {
	opts = opts.withDefaults()
	p := ep.Size()
	if p < 1 || ep.Rank() < 0 || ep.Rank() >= p {
		return nil, fmt.Errorf("collective: endpoint has rank %d of size %d", ep.Rank(), p)
	}
	alg, err := opts.build(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	largeSeg, chunk := 0, 0
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = DefaultSegmentBytes
		largeSeg = transport.LargeSegment(ep)
		chunk = chunkBytes(p)
	}
	if a, ok := alg.(*auto); ok && opts.Links == nil && onSharedMemory(base) {
		a.useSharedMemory()
	}
	// Found under any decorator (a straggler's delays touch sends only): borrowing spares a
	// copy of every segment reduced.
	borrow, _ := transport.As[transport.Borrower](ep)
	c := &Comm{
		ep: ep, base: base, jobRanks: jobRanks, chans: chans, who: who,
		borrow: borrow, opts: opts, largeSeg: largeSeg, chunk: chunk, algName: opts.Algorithm, alg: alg,
		sigAlg:     sigAlgorithm(opts.Algorithm, alg),
		cache:      make(map[schedKey]*schedule),
		sendSig:    make(chan struct{}, 1),
		recvSig:    make(chan struct{}, 1),
		senderDone: make(chan error, 1),
		p2pSend:    make([]p2pLane, p),
		p2pRecv:    make([]p2pLane, p),
	}
	c.sentBy = newCommLinkCounter(ep, base, opts.Links)
	if ep == base {
		// Re-measuring needs the job's own endpoint: a sub-communicator's carries only the
		// collectives' channel, so it keeps the plan of its part of the job's matrix.
		c.replan = newReplanner(opts, alg, p, ep.Rank())
		if a, ok := alg.(*auto); ok && a.reg.arena {
			c.arena = newArenaColl(transport.HostArena(ep), p, ep.Rank())
		}
	}
	c.dctx.init()
	c.initWatch()
	return c, nil
}

// Rank is this rank.
func (c *Comm) Rank() int { return c.ep.Rank() }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.ep.Size() }

// Algorithm is the configured algorithm name.
func (c *Comm) Algorithm() string { return c.algName }

// BytesSent is how many payload bytes the collective calls of c have sent, as they went on
// the wire (encoded, for a compressed allreduce), headers not counted.
func (c *Comm) BytesSent() int64 { return c.bytesSent.Load() }

// Endpoint is the transport under the communicator.
func (c *Comm) Endpoint() transport.Endpoint { return c.ep }

// AllReduce reduces buf over all ranks and leaves the result in every rank's buf. Avg is Sum
// followed by a division by p: multiplication by 1/p for floats, truncating integer division
// for integers.
func (c *Comm) AllReduce(ctx context.Context, buf Buffer, op ReduceOp) error {
	if err := c.checkArgs(kindAllReduce, buf, op, 0); err != nil {
		return err
	}
	return c.run(ctx, kindAllReduce, buf, Buffer{}, op, 0)
}

// ReduceScatter reduces buf over all ranks in place; afterwards block Partition(n, p, rank) of
// buf holds the reduced values (the rest of buf holds partial results, or the input when the
// call ran through the host's arena).
func (c *Comm) ReduceScatter(ctx context.Context, buf Buffer, op ReduceOp) error {
	if err := c.checkArgs(kindReduceScatter, buf, op, 0); err != nil {
		return err
	}
	return c.run(ctx, kindReduceScatter, buf, Buffer{}, op, 0)
}

// AllGather fills buf on every rank with each rank's block Partition(n, p, rank).
func (c *Comm) AllGather(ctx context.Context, buf Buffer) error {
	if err := c.checkArgs(kindAllGather, buf, Sum, 0); err != nil {
		return err
	}
	return c.run(ctx, kindAllGather, buf, Buffer{}, 0, 0)
}

// Broadcast copies root's buf to every rank: a segmented binomial tree for messages up to
// broadcastChainBytes, a pipelined chain above (under auto on one host with an arena, from
// arenaBroadcastBytes: through the arena, see arena_gather.go).
func (c *Comm) Broadcast(ctx context.Context, buf Buffer, root int) error {
	if err := c.checkArgs(kindBroadcast, buf, Sum, root); err != nil {
		return err
	}
	return c.run(ctx, kindBroadcast, buf, Buffer{}, 0, root)
}

// Reduce reduces buf over all ranks into root's buf with a segmented binomial tree. The buffers
// of the other ranks hold partial results afterwards.
func (c *Comm) Reduce(ctx context.Context, buf Buffer, op ReduceOp, root int) error {
	if err := c.checkArgs(kindReduce, buf, op, root); err != nil {
		return err
	}
	return c.run(ctx, kindReduce, buf, Buffer{}, op, root)
}

// Barrier returns once every rank has entered it (dissemination barrier, ⌈lg p⌉ rounds).
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, kindBarrier, Buffer{DType: Int32}, Buffer{}, 0, 0)
}

// AllToAll sends block j of send to rank j and leaves block i of recv with what rank i sent
// (pairwise exchange in p-1 rounds). send and recv have the same dtype and length, divisible by p.
func (c *Comm) AllToAll(ctx context.Context, send, recv Buffer) error {
	if err := c.checkAllToAll(send, recv); err != nil {
		return err
	}
	return c.run(ctx, kindAllToAll, recv, send, 0, 0)
}

func (c *Comm) checkAllToAll(send, recv Buffer) error {
	if err := c.checkArgs(kindAllToAll, recv, Sum, 0); err != nil {
		return err
	}
	if send.DType != recv.DType || len(send.Bytes) != len(recv.Bytes) {
		return c.argErr(kindAllToAll, "send buffer (%v, %d bytes) and recv buffer (%v, %d bytes) differ",
			send.DType, len(send.Bytes), recv.DType, len(recv.Bytes))
	}
	if recv.Len()%c.Size() != 0 {
		return c.argErr(kindAllToAll, "length %d is not divisible by the %d ranks", recv.Len(), c.Size())
	}
	return nil
}

// Send sends buf to rank `to`, which must call Recv (or IRecv) with a buffer of the same dtype
// and length. Point-to-point messages have their own sequence numbers per peer and direction,
// and go in the order they were issued (after the ISends to that peer issued before); at most
// one goroutine may issue them to (or from) a given peer. They do not take turns with the
// collectives, and they are bounded like them (Options.Timeout or the context's deadline); a
// failed Send or Recv leaves the collectives usable.
func (c *Comm) Send(ctx context.Context, to int, buf Buffer) error {
	if err := c.checkPeer("send", to, buf); err != nil {
		return err
	}
	seq, prev := c.p2pIssue(&c.p2pSend[to], nil)
	return c.send(ctx, to, seq, prev, buf)
}

// Recv receives into buf what rank `from` sent with Send (or ISend).
func (c *Comm) Recv(ctx context.Context, from int, buf Buffer) error {
	if err := c.checkPeer("recv", from, buf); err != nil {
		return err
	}
	seq, prev := c.p2pIssue(&c.p2pRecv[from], nil)
	return c.recv(ctx, from, seq, prev, buf)
}

func (c *Comm) checkPeer(what string, peer int, buf Buffer) error {
	if c.closed.Load() {
		return fmt.Errorf("%s: %s with rank %d: %w", c.who, what, peer, ErrClosed)
	}
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return fmt.Errorf("%s: %s: peer rank %d is out of range [0, %d) or this rank itself", c.who, what, peer, c.Size())
	}
	if buf.DType.Size() == 0 {
		return fmt.Errorf("%s: %s: invalid dtype %v", c.who, what, buf.DType)
	}
	if len(buf.Bytes)%buf.DType.Size() != 0 {
		return fmt.Errorf("%s: %s: %d bytes is not a whole number of %v elements", c.who, what, len(buf.Bytes), buf.DType)
	}
	return nil
}

func (c *Comm) argErr(kind collKind, format string, args ...any) error {
	return fmt.Errorf("%s: %v (%s): %s", c.who, kind, c.algName, fmt.Sprintf(format, args...))
}

func (c *Comm) checkArgs(kind collKind, buf Buffer, op ReduceOp, root int) error {
	if buf.DType.Size() == 0 {
		return c.argErr(kind, "invalid dtype %v", buf.DType)
	}
	if len(buf.Bytes)%buf.DType.Size() != 0 {
		return c.argErr(kind, "%d bytes is not a whole number of %v elements", len(buf.Bytes), buf.DType)
	}
	if op < Sum || op > Prod {
		return c.argErr(kind, "invalid reduction %v", op)
	}
	if root < 0 || root >= c.Size() {
		return c.argErr(kind, "root %d out of range [0, %d)", root, c.Size())
	}
	if (c.opts.Codec == transport.CodecFP16 || c.opts.Codec == transport.CodecBF16) && buf.DType != Float32 {
		return c.argErr(kind, "codec %d (lossy float cast) needs float32 data, not %v", c.opts.Codec, buf.DType)
	}
	return nil
}
