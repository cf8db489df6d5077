package collective

import (
	"context"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// How one collective call runs once its arguments are checked: the schedule cache, the
// call's turn, its execution over the endpoint (executor.go) or the host's arena, and the
// abort that tells the peers when it fails.

// schedKey is what a cached schedule is built for.
type schedKey struct {
	kind     collKind
	n, root  int
	elemSize int
}

// maxCachedSchedules bounds the schedule cache; a full cache is dropped and rebuilt.
const maxCachedSchedules = 256

// schedule returns the cached schedule for a call, building it on first use.
func (c *Comm) schedule(kind collKind, n, root int, dt DType) *schedule {
	key := schedKey{kind: kind, n: n, root: root, elemSize: dt.Size()}
	if s, ok := c.cache[key]; ok {
		return s
	}
	if len(c.cache) >= maxCachedSchedules {
		clear(c.cache)
	}
	s := c.build(c.alg, kind, n, root, dt)
	c.cache[key] = s
	return s
}

// build builds the schedule of a call under alg and makes the pooled receive buffer large
// enough for it.
func (c *Comm) build(alg algorithm, kind collKind, n, root int, dt DType) *schedule {
	var s *schedule
	if k := c.allReduceChunks(kind, n, dt.Size()); k > 1 {
		s = buildChunkedAllReduce(alg, c.Size(), c.Rank(), n, dt.Size(), c.segmentBytes(n, dt.Size()), k)
	} else {
		s = buildSchedule(alg, kind, c.Size(), c.Rank(), n, root, dt.Size(), c.segmentBytes(n, dt.Size()))
	}
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
	if !c.zipWanted(kind, buf, op) && c.arenaTakes(kind, len(buf.Bytes)) {
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
	if c.zipWanted(kind, buf, op) {
		s = c.zipSchedule(s, n)
	}
	if s.err != nil {
		return fmt.Errorf("%s: %v #%d (%s): the algorithm's schedule: %w", c.who, kind, seq, c.algName, s.err)
	}
	if kind == kindAllToAll && n > 0 {
		lo, hi := c.Rank()*n/c.Size(), (c.Rank()+1)*n/c.Size()
		es := buf.DType.Size()
		copy(buf.Bytes[lo*es:hi*es], aux.Bytes[lo*es:hi*es])
	}
	h := transport.Header{Channel: chanCollective, Codec: c.codecFor(buf.DType), Seq: seq,
		Op: c.signature(kind, buf.DType, op, n, root)}
	zipped := c.zipBegin(kind, buf, op, s)
	if zipped {
		h.Op = c.zip.signed(h.Op)
	}
	if err := c.arenaPublish(seq, h.Op); err != nil {
		return c.callErr(ctx, kind, seq, limit, err)
	}
	start := c.replan.clock()
	attributed := c.attr.beginStamps(s, time.Now())
	err = c.execute(ctx, s, buf, aux, op, h)
	if err == nil && zipped {
		c.zipEnd(buf)
	}
	c.zip.codec = nil
	if attributed {
		c.attr.endStamps(time.Now())
	}
	switch {
	case err != nil:
		err = c.callErr(ctx, kind, seq, limit, err)
	case !zipped:
		// The plan prices float32 calls: a compressed call's time says nothing of the links
		// it was planned from, and must not make the ranks measure them again.
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
