package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// DefaultSegmentBytes is the pipelining segment size when Options.SegmentBytes is 0: Gloo's
// kMaxSegmentSize and KungFu's chunk size. Calls of LargeCallBytes or more over an endpoint
// that asks for larger segments use those instead (see segmentFor).
const DefaultSegmentBytes = 1 << 20

// LargeCallBytes is the buffer size from which a call uses the endpoint's large segments
// (transport.LargeSegmenter) when Options.SegmentBytes is 0.
const LargeCallBytes = 32 << 20

// Options configure a Comm.
type Options struct {
	// Algorithm is "ring", "butterfly", "binary-blocks", "ps" or "auto" (the default when empty).
	Algorithm string
	// SegmentBytes is the largest message the collectives send; larger ranges are split into
	// segments that are pipelined. 0 means DefaultSegmentBytes, or for calls of LargeCallBytes
	// or more the endpoint's transport.LargeSegment when it has one.
	SegmentBytes int
	// Servers is, for "ps" only, the number of server ranks (ranks 0..Servers-1) that host the
	// shards; 0 means every rank (colocated servers).
	Servers int
	// Codec is the wire codec for payloads. The lossy casts (FP16, BF16) need float32 buffers.
	Codec transport.Codec
	// Links is the job's link matrix (hosts and per-pair costs), the same on every rank; with
	// it auto, ring order, ps placement and the hier- configurations plan from the network.
	Links *topology.Matrix
	// Timeout bounds every call whose context has no deadline, from when the call starts
	// running (after the calls issued before it): 0 means DefaultTimeout, NoTimeout (or any
	// negative value) no limit. A call whose context has a deadline runs until that deadline
	// instead, sooner or later. A call that runs out of time fails with a *TimeoutError and
	// leaves the communicator unusable.
	Timeout time.Duration
	// Watch says what the Comm reports while its calls run: stalls, a timeline (watchdog.go).
	Watch Watch
	// Replan tunes how auto re-plans when the network changes under the job (see
	// ReplanOptions); the zero value re-plans with the defaults.
	Replan ReplanOptions
}

// Validate checks the options against a job of p ranks.
func (o Options) Validate(p int) error {
	if o.Algorithm == "" {
		o.Algorithm = "auto"
	}
	if o.SegmentBytes < 0 {
		return fmt.Errorf("collective: SegmentBytes %d is negative", o.SegmentBytes)
	}
	if o.Servers < 0 || o.Servers > p {
		return fmt.Errorf("collective: Servers %d out of range [0, %d] for a job of %d ranks", o.Servers, p, p)
	}
	if o.Servers != 0 && o.Algorithm != "ps" {
		return fmt.Errorf("collective: Servers is only meaningful with Algorithm \"ps\", not %q", o.Algorithm)
	}
	if err := validateLinks(o.Links, p); err != nil {
		return err
	}
	if err := o.Replan.Validate(); err != nil {
		return err
	}
	if o.Codec > transport.CodecBF16 {
		return fmt.Errorf("collective: unknown codec %d", o.Codec)
	}
	if _, err := lookupAlgorithm(o.Algorithm, o); err != nil {
		return err
	}
	return nil
}

// collKind names a collective; it is part of the op signature.
type collKind uint8

const (
	kindAllReduce collKind = iota + 1
	kindReduceScatter
	kindAllGather
	kindBroadcast
	kindReduce
	kindBarrier
	kindAllToAll
	kindPointToPoint
	kindAttribution // the stamps that end an attributed call (attrib.go)
)

func (k collKind) String() string {
	switch k {
	case kindAllReduce:
		return "allreduce"
	case kindReduceScatter:
		return "reduce-scatter"
	case kindAllGather:
		return "allgather"
	case kindBroadcast:
		return "broadcast"
	case kindReduce:
		return "reduce"
	case kindBarrier:
		return "barrier"
	case kindAllToAll:
		return "alltoall"
	case kindPointToPoint:
		return "send/recv"
	case kindAttribution:
		return "attribution"
	}
	return "collective?"
}

// abortOp is the op signature of the frame a rank sends to every peer when a collective fails
// on its side, so that peers blocked on it get an error instead of waiting forever.
const abortOp uint32 = 0xAB0A7ED0

type schedKey struct {
	kind     collKind
	n, root  int
	elemSize int
}

// maxCachedSchedules bounds the schedule cache; a full cache is dropped and rebuilt.
const maxCachedSchedules = 256

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
	borrow   transport.Borrower // ep, when it lends received payloads (nil otherwise)
	opts     Options
	// largeSeg is the segment size of large calls (segmentFor); 0 when Options.SegmentBytes
	// was set or the endpoint has no preference.
	largeSeg int
	// chunk is the chunk size of a large allreduce (chunk.go); 0 when Options.SegmentBytes was
	// set, which asks for the algorithm's own schedule cut in such segments.
	chunk   int
	algName string
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
	watch                watchdog    // stall reports and the endpoint's activity record (watchdog.go)
	attr                 attribution // who the calls waited for (attrib.go)

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
	if opts.Algorithm == "" {
		opts.Algorithm = "auto"
	}
	p := ep.Size()
	if p < 1 || ep.Rank() < 0 || ep.Rank() >= p {
		return nil, fmt.Errorf("collective: endpoint has rank %d of size %d", ep.Rank(), p)
	}
	if err := opts.Validate(p); err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	largeSeg, chunk := 0, 0
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = DefaultSegmentBytes
		largeSeg = transport.LargeSegment(ep)
		chunk = chunkBytes(p)
	}
	alg, _ := lookupAlgorithm(opts.Algorithm, opts)
	if a, ok := alg.(*auto); ok && opts.Links == nil && onSharedMemory(base) {
		a.useSharedMemory()
	}
	borrow, _ := ep.(transport.Borrower)
	c := &Comm{
		ep: ep, base: base, jobRanks: jobRanks, chans: chans, who: who,
		borrow: borrow, opts: opts, largeSeg: largeSeg, chunk: chunk, algName: opts.Algorithm, alg: alg,
		cache:      make(map[schedKey]*schedule),
		sendSig:    make(chan struct{}, 1),
		recvSig:    make(chan struct{}, 1),
		senderDone: make(chan error, 1),
		p2pSend:    make([]p2pLane, p),
		p2pRecv:    make([]p2pLane, p),
	}
	if ep == base {
		// Re-measuring needs the job's own endpoint: a sub-communicator's carries only the
		// collectives' channel, so it keeps the plan of its part of the job's matrix.
		c.replan = newReplanner(opts, alg, p, ep.Rank())
		if opts.Algorithm == "auto" {
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

// codecFor is the wire codec for a payload of dt: the configured one, except that integers go
// exactly when it is a lossy float cast (the public calls refuse them then; Split's own
// exchanges of ranks and channels use it).
func (c *Comm) codecFor(dt DType) transport.Codec {
	if c.opts.Codec.Lossy() && dt != Float32 {
		return transport.CodecNone
	}
	return c.opts.Codec
}

// signature hashes what every rank must agree on (FNV-1a, no allocation).
func (c *Comm) signature(kind collKind, dt DType, op ReduceOp, n, root int) uint32 {
	// A rank whose peers are not all on shared memory plans on another model and may choose
	// another algorithm: its calls must fail as different collectives, not mix.
	a, ok := c.alg.(*auto)
	return sigPrefix(kind, c.algName, ok && a.sharedMemory()).args(dt, op, n, root)
}

// sigHash is an op signature being hashed: FNV-1a's state.
type sigHash uint32

func (h sigHash) mix(b byte) sigHash { return (h ^ sigHash(b)) * 16777619 }

// sigPrefix hashes what a signature starts with: the collective, the algorithm's name and
// whether auto plans for shared memory.
func sigPrefix(kind collKind, alg string, shm bool) sigHash {
	h := sigHash(2166136261).mix(byte(kind))
	for i := 0; i < len(alg); i++ {
		h = h.mix(alg[i])
	}
	if shm {
		h = h.mix('s')
	}
	return h
}

// args ends the signature with the call's arguments.
func (h sigHash) args(dt DType, op ReduceOp, n, root int) uint32 {
	h = h.mix(byte(dt)).mix(byte(op))
	for i := 0; i < 64; i += 8 {
		h = h.mix(byte(uint64(n) >> i))
	}
	for i := 0; i < 64; i += 8 {
		h = h.mix(byte(uint64(root) >> i))
	}
	if uint32(h) == abortOp {
		h++
	}
	return uint32(h)
}

// schedule returns the cached schedule for a call, building it on first use.
func (c *Comm) schedule(kind collKind, n, root int, dt DType) *schedule {
	key := schedKey{kind: kind, n: n, root: root, elemSize: dt.Size()}
	if s, ok := c.cache[key]; ok {
		return s
	}
	if len(c.cache) >= maxCachedSchedules {
		clear(c.cache)
	}
	var s *schedule
	if k := c.allReduceChunks(kind, n, dt.Size()); k > 1 {
		s = buildChunkedAllReduce(c.alg, c.Size(), c.Rank(), n, dt.Size(), c.segmentBytes(n, dt.Size()), k)
	} else {
		s = buildSchedule(c.alg, kind, c.Size(), c.Rank(), n, root, dt.Size(), c.segmentBytes(n, dt.Size()))
	}
	c.cache[key] = s
	c.growTemp(s, dt.Size())
	return s
}

// allReduceChunks is how many chunks a call of kind over n elements of elemSize bytes runs as
// (chunk.go): 1 unless it is an allreduce of a job of several ranks, planned without a link
// matrix, with the default segment size.
func (c *Comm) allReduceChunks(kind collKind, n, elemSize int) int {
	if kind != kindAllReduce || c.Size() < 2 || c.opts.Links != nil {
		return 1
	}
	return chunks(n, elemSize, c.chunk)
}

// segmentBytes is the segment size of a call of n elements of elemSize bytes.
func (c *Comm) segmentBytes(n, elemSize int) int {
	return segmentFor(n, elemSize, c.opts.SegmentBytes, c.largeSeg)
}

// segmentFor is the segment size of a call of n elements of elemSize bytes, the same on every
// rank: seg, or large (when positive) for calls of LargeCallBytes or more. Over TCP each
// message costs a wake-up of the reader and of the receiver and a pass through the socket's
// send path, and a schedule with messages above 1 MiB runs its sends on their own goroutine
// (see execute), so that receives are posted early and take their segments straight from the
// socket; with blocks of several MiB per rank a few segments per block still overlap
// reduction and transfer (docs/results/tcp-large.md has the measurements).
func segmentFor(n, elemSize, seg, large int) int {
	if large > 0 && n*elemSize >= LargeCallBytes {
		return large
	}
	return seg
}

// growTemp makes the pooled receive buffer large enough for schedule s.
func (c *Comm) growTemp(s *schedule, elemSize int) {
	if need := (s.maxTemp*elemSize + 7) / 8; need > len(c.temp) && c.borrow == nil {
		c.temp = make([]uint64, need)
	}
}

// buildSchedule is the pure function from a call to one rank's schedule.
func buildSchedule(alg algorithm, kind collKind, p, rank, n, root, elemSize, segBytes int) *schedule {
	b := newBuilder(p, rank, n, elemSize, segBytes)
	if p > 1 && n == 0 {
		// Nothing to move, but the ranks still compare signatures (a dissemination barrier of
		// empty messages): a rank that passed 0 elements where its peers passed more must
		// fail with them, not leave them waiting.
		buildBarrier(b)
	} else if p > 1 {
		switch kind {
		case kindAllReduce:
			alg.allReduce(b)
		case kindReduceScatter:
			alg.reduceScatter(b)
		case kindAllGather:
			alg.allGather(b)
		case kindBroadcast:
			buildBroadcast(b, root)
		case kindReduce:
			buildReduce(b, root)
		case kindBarrier:
			buildBarrier(b)
		case kindAllToAll:
			buildAllToAll(b)
		}
	}
	return b.finish()
}

// run issues one collective call and runs it on the caller's goroutine at its turn.
func (c *Comm) run(ctx context.Context, kind collKind, buf, aux Buffer, op ReduceOp, root int) error {
	seq, queued := c.turns.issue(nil)
	if queued != nil {
		if err := c.awaitTurn(ctx, kind, queued); err != nil {
			return err
		}
	}
	err := c.exec(ctx, seq, kind, buf, aux, op, root)
	c.passTurn()
	return err
}

// exec runs collective call seq; the caller has the turn.
func (c *Comm) exec(ctx context.Context, seq uint64, kind collKind, buf, aux Buffer, op ReduceOp, root int) (err error) {
	c.callStarted(seq, kind)
	defer func() { c.callEnded(seq, kind, len(buf.Bytes), err) }()
	if c.closed.Load() {
		err = fmt.Errorf("%s: %v #%d (%s): %w", c.who, kind, seq, c.algName, ErrClosed)
		if c.broken == nil {
			// The peers expect this rank in collective seq: tell them it is not coming.
			c.broken = err
			c.abort(seq, err)
		}
		return err
	}
	if c.broken != nil {
		return fmt.Errorf("%s: %v #%d (%s): communicator unusable after an earlier failure: %w",
			c.who, kind, seq, c.algName, c.broken)
	}
	if err := ctx.Err(); err != nil {
		// The peers expect this rank in collective seq: tell them it is not coming.
		c.broken = err
		err = fmt.Errorf("%s: %v #%d (%s): %w", c.who, kind, seq, c.algName, err)
		c.abort(seq, err)
		return err
	}
	c.cur = callDesc{kind: kind, dt: buf.DType, op: op, n: buf.Len(), root: root}
	ctx, release, limit := c.limit(ctx)
	defer release()
	c.recvPeer.Store(-1)
	c.sendPeer.Store(-1)
	n := buf.Len()
	if c.arenaTakes(kind, len(buf.Bytes)) {
		err = c.execArena(ctx, seq, kind, buf, op, root, limit)
	} else {
		err = c.execSchedule(ctx, seq, kind, buf, aux, op, root, limit)
	}
	if err != nil {
		if c.closed.Load() {
			// Closed while the call ran: what failed (a closed connection, the arena) is
			// a consequence; say the cause first.
			err = fmt.Errorf("%w during the call: %w", ErrClosed, err)
		}
		c.broken = err
		c.abort(seq, err)
		return err
	}
	if op == Avg && c.Size() > 1 {
		switch kind {
		case kindAllReduce:
			average(buf, c.Size())
		case kindReduceScatter:
			lo, hi := Partition(n, c.Size(), c.Rank())
			average(buf.Slice(lo, hi), c.Size())
		case kindReduce:
			if c.Rank() == root {
				average(buf, c.Size())
			}
		}
	}
	return nil
}

// execSchedule runs call seq as its schedule over the endpoint.
func (c *Comm) execSchedule(ctx context.Context, seq uint64, kind collKind, buf, aux Buffer, op ReduceOp, root int, limit time.Duration) (err error) {
	n := buf.Len()
	s := c.schedule(kind, n, root, buf.DType)
	if kind == kindAllToAll && n > 0 {
		lo, hi := c.Rank()*n/c.Size(), (c.Rank()+1)*n/c.Size()
		es := buf.DType.Size()
		copy(buf.Bytes[lo*es:hi*es], aux.Bytes[lo*es:hi*es])
	}
	h := transport.Header{Channel: chanCollective, Codec: c.codecFor(buf.DType), Seq: seq,
		Op: c.signature(kind, buf.DType, op, n, root)}
	if err := c.arenaPublish(seq, h.Op); err != nil {
		return c.callErr(ctx, kind, seq, limit, err)
	}
	start := c.replan.clock()
	attributed := c.attr.beginStamps(s, time.Now())
	err = c.execute(ctx, s, buf, aux, op, h)
	if attributed {
		c.attr.endStamps(time.Now())
	}
	if err != nil {
		err = c.callErr(ctx, kind, seq, limit, err)
	} else {
		err = c.replanAfter(ctx, seq, kind, n, buf.DType, start)
	}
	if err == nil && attributed {
		if err = c.attribute(ctx, seq, kind, len(buf.Bytes), s); err != nil {
			err = c.callErr(ctx, kind, seq, limit, err)
		}
	}
	return err
}

// abort tells every peer that this rank gave up on collective seq because of err, and why
// (abort.go), best effort and in bounded time.
func (c *Comm) abort(seq uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h := transport.Header{Channel: chanCollective, Seq: seq, Op: abortOp}
	first, reason := c.abortReason(err)
	for r := 0; r < c.Size(); r++ {
		if r != c.Rank() {
			c.tellAbortReason(ctx, r, seq, first, []byte(reason))
			_ = c.ep.Send(ctx, r, h, nil)
		}
	}
	c.arenaAbort(seq)
}
