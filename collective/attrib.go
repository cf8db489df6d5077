package collective

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// Culprit is what the waiting in a call is attributed to.
type Culprit uint8

// Culprits.
const (
	CulpritNone Culprit = iota // nobody waited, or the call was not attributed
	CulpritRank                // a rank arrived late (CallStats.LateRank)
	CulpritLink                // a link delivered slowly (CallStats.SlowLink)
)

func (c Culprit) String() string {
	switch c {
	case CulpritRank:
		return "rank"
	case CulpritLink:
		return "link"
	}
	return "none"
}

// Link is the directed link From → To between two ranks of a communicator.
type Link struct{ From, To int }

func (l Link) String() string { return fmt.Sprintf("%d->%d", l.From, l.To) }

// CallStats is what the communicator measured of its last collective call while attribution
// was on (SetAttribution). Ranks are the communicator's. Every rank of the call computes the
// same LateRank, Skew, SlowLink, LinkDelay and Culprit from the same gathered stamps.
type CallStats struct {
	Seq   uint64
	Kind  string // "allreduce", "barrier", …
	Bytes int
	// Start is when this rank's call started running, on its wall clock; Duration is from
	// then until its last message was done.
	Start    time.Time
	Duration time.Duration
	// Waited is, per peer, how long this rank was blocked receiving from that peer: from
	// posting each receive to its completion.
	Waited []time.Duration
	// Arrival is, per rank, when it started the call after the earliest rank did.
	Arrival []time.Duration
	// Skew is the largest Arrival; LateRank the rank that arrived last (-1 when the call has
	// one rank or every rank arrived at the same instant).
	Skew     time.Duration
	LateRank int
	// SlowLink is the link whose messages took longest to arrive once both its ends were
	// ready, beyond what the call's other links took for as many messages; LinkDelay is that
	// excess ({-1, -1} and 0 when no link carried a message).
	SlowLink  Link
	LinkDelay time.Duration
	// Culprit is whichever explains more of the waiting: the late rank (Skew) or the slow link
	// (LinkDelay).
	Culprit Culprit
	// WaitedForLate is how long this rank waited because LateRank arrived after it: its
	// arrival gap, at most the time it was blocked receiving.
	WaitedForLate time.Duration
	// LinkWait is, per peer, how much longer that peer's messages to this rank took, once
	// both ends were ready, than as many messages take on the call's links normally: this
	// rank's share of a slow link's delay.
	LinkWait []time.Duration
}

// Waits is what attribution found over every attributed call of a communicator so far: the
// running totals a caller differences to cover a span of calls (a training round).
type Waits struct {
	Calls int
	// ForRank is, per rank, how long this rank waited for that rank: because it arrived late
	// (Σ CallStats.WaitedForLate over the calls it arrived last in) or because its messages
	// to this rank took longer than the call's links normally do (Σ CallStats.LinkWait).
	ForRank []time.Duration
	// MadeWait is, per rank, Σ over the calls it arrived last in of the time the other ranks
	// waited for it (Σ of their WaitedForLate): the same number on every rank.
	MadeWait []time.Duration
	// LinkDelay is Σ CallStats.LinkDelay per sender (row) and receiver (column), p × p.
	LinkDelay []time.Duration
}

// Row layout of the gathered stamps, one row of int64 per rank: when it started, how long it
// was blocked receiving, then per peer the time its messages took once both ends were ready
// and their count.
const (
	stampStart = iota
	stampBlocked
	stampHead
)

// phase-1 messages travel with this segment, which no schedule's tags reach.
const stampSegment = 1 << 31

// attribution is the Comm's per-call record of its messages and what the gathering of them
// found. It is touched by the call that has the turn only; its slices grow to the largest
// schedule once and are reused.
type attribution struct {
	on        atomic.Bool // SetAttribution: attribute the calls from the next one on
	recording bool        // the running call's messages are being stamped

	start, end int64   // unix ns
	sendAt     []int64 // start of each send of the call, in schedule order
	postAt     []int64 // each receive: when it was posted
	doneAt     []int64 // each receive: when it completed
	ns, nr     int

	perPeer    []int // layout's offsets, ends and cursors per peer
	out, in    []byte
	table      []int64   // p rows of stampHead+2p
	gather     *schedule // the allgather of the table, built on first use
	tableBytes []byte
	waited     []time.Duration // per peer, this call
	perMsg     []int64         // judge's scratch

	mu   sync.Mutex // guards last and cum, which LastCall and Waits read from any goroutine
	last CallStats
	cum  Waits
}

// SetAttribution turns per-call attribution on or off for the calls that start running after
// it (a non-blocking call already issued but still waiting for its turn included). With it on,
// every call ends with an exchange of a few stamps per message between the ranks that
// exchanged messages and an allgather of p·(2+2p) int64, after which LastCall and Waits say
// which rank or link the call waited for (docs/attribution.md). Every rank must switch at the
// same point of its call sequence: a rank that attributes a call its peers do not fails the
// call with a mismatch naming the peer.
func (c *Comm) SetAttribution(on bool) { c.attr.on.Store(on) }

// LastCall is what attribution measured of the last call that ran with it on, and false when
// none has.
func (c *Comm) LastCall() (CallStats, bool) {
	c.attr.mu.Lock()
	defer c.attr.mu.Unlock()
	s := c.attr.last
	if s.Kind == "" {
		return CallStats{}, false
	}
	s.Waited, s.Arrival, s.LinkWait = slices.Clone(s.Waited), slices.Clone(s.Arrival), slices.Clone(s.LinkWait)
	return s, true
}

// Waits is the running totals of attribution (zero Calls when it never ran).
func (c *Comm) Waits() Waits {
	c.attr.mu.Lock()
	defer c.attr.mu.Unlock()
	w := c.attr.cum
	w.ForRank, w.MadeWait, w.LinkDelay = slices.Clone(w.ForRank), slices.Clone(w.MadeWait), slices.Clone(w.LinkDelay)
	return w
}

// beginStamps makes room for the stamps of schedule s and starts recording them, when
// attribution is on; it reports whether it is.
func (a *attribution) beginStamps(s *schedule, now time.Time) bool {
	if !a.on.Load() {
		return false
	}
	a.sendAt = grow(a.sendAt, len(s.sends))
	a.postAt = grow(a.postAt, len(s.recvs))
	a.doneAt = grow(a.doneAt, len(s.recvs))
	a.ns, a.nr = 0, 0
	a.start = now.UnixNano()
	a.recording = true
	return true
}

// endStamps stops recording at the end of the call's messages.
func (a *attribution) endStamps(now time.Time) {
	a.recording = false
	a.end = now.UnixNano()
}

// message stamps one message of the running call: the executor runs sends in schedule order
// on one goroutine and receives in schedule order on one goroutine, so the i-th stamp of a
// kind is the i-th step of that kind.
func (a *attribution) message(recv bool, start, end time.Time) {
	if recv {
		if a.nr < len(a.postAt) {
			a.postAt[a.nr], a.doneAt[a.nr] = start.UnixNano(), end.UnixNano()
			a.nr++
		}
		return
	}
	if a.ns < len(a.sendAt) {
		a.sendAt[a.ns] = start.UnixNano()
		a.ns++
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// attribute runs the exchange that ends an attributed call seq, whose schedule s ran to its end
// with its messages stamped, and records what it found. Phase 1: every rank sends each peer it
// sent messages to the start times of those sends, so that the receiver can split each of its
// waits into the part before the sender had begun (the sender was late) and the part after (the
// link). Phase 2: an allgather of each rank's summary row, from which every rank computes the
// same verdict.
func (c *Comm) attribute(ctx context.Context, seq uint64, kind collKind, bytes int, s *schedule) error {
	a := &c.attr
	p, me := c.Size(), c.Rank()
	if a.ns != len(s.sends) || a.nr != len(s.recvs) {
		return fmt.Errorf("attribution: stamped %d sends and %d receives of %d and %d", a.ns, a.nr, len(s.sends), len(s.recvs))
	}
	row := stampHead + 2*p
	a.table = grow(a.table, p*row)
	a.tableBytes = grow(a.tableBytes, 8*p*row)
	mine := a.table[me*row : (me+1)*row]
	clear(mine)
	mine[stampStart] = a.start
	h := transport.Header{Channel: chanCollective, Seq: seq, Segment: stampSegment,
		Op: c.signature(kindAttribution, Int64, 0, bytes, 1)}
	if err := c.sendStamps(ctx, s, h); err != nil {
		return fmt.Errorf("attribution: %w", err)
	}
	if err := c.recvStamps(ctx, s, h, mine); err != nil {
		return fmt.Errorf("attribution: %w", err)
	}
	for i, v := range mine {
		binary.LittleEndian.PutUint64(a.tableBytes[8*(me*row+i):], uint64(v))
	}
	n := p * row
	if a.gather == nil {
		// The stamps are a few bytes per rank, so the gather is latency-bound: recursive
		// doubling (⌈lg p⌉ messages per rank, plus the fold for extra ranks) whatever the
		// algorithm of the Comm's own calls.
		a.gather = buildSchedule(butterfly{}, kindAllGather, p, me, n, 0, Int64.Size(), c.opts.SegmentBytes)
	}
	gather := a.gather
	h = transport.Header{Channel: chanCollective, Seq: seq, Op: c.signature(kindAttribution, Int64, 0, n, 0)}
	if err := c.execute(ctx, gather, Buffer{DType: Int64, Bytes: a.tableBytes}, Buffer{}, Sum, h); err != nil {
		return fmt.Errorf("attribution: gathering the stamps: %w", err)
	}
	for i := range a.table {
		a.table[i] = int64(binary.LittleEndian.Uint64(a.tableBytes[8*i:]))
	}
	a.record(seq, kind, bytes, p, me)
	return nil
}

// layout lays out 8 bytes per step of steps by peer: peer q's part of the buffer is
// [a.off(q), a.end(q)). It returns the buffer's length and resets the cursors to the starts.
func (a *attribution) layout(steps []step, p int) int {
	a.perPeer = grow(a.perPeer, 3*p)
	off, end, pos := a.perPeer[:p], a.perPeer[p:2*p], a.perPeer[2*p:]
	clear(end)
	for i := range steps {
		end[steps[i].peer] += 8
	}
	total := 0
	for q := range p {
		off[q] = total
		total += end[q]
		end[q] = total
	}
	copy(pos, off)
	return total
}

// next is the offset of the next stamp of peer q in the buffer laid out by layout.
func (a *attribution) next(q, p int) int {
	i := a.perPeer[2*p+q]
	a.perPeer[2*p+q] += 8
	return i
}

// sendStamps sends each peer this rank sent messages to the start times of those sends.
func (c *Comm) sendStamps(ctx context.Context, s *schedule, h transport.Header) error {
	a := &c.attr
	p := c.Size()
	a.out = grow(a.out, a.layout(s.sends, p))
	for i := range s.sends {
		binary.LittleEndian.PutUint64(a.out[a.next(s.sends[i].peer, p):], uint64(a.sendAt[i]))
	}
	for q := range p {
		if lo, hi := a.perPeer[q], a.perPeer[p+q]; hi > lo {
			if err := c.ep.Send(ctx, q, h, a.out[lo:hi]); err != nil {
				return fmt.Errorf("sending stamps to rank %d: %w", q, err)
			}
			c.sentBy.Count(q, hi-lo)
		}
	}
	return nil
}

// recvStamps receives the start times of the messages each peer sent this rank and fills
// this rank's summary row: the time it was blocked receiving and, per peer, the time that
// peer's messages took once both ends were ready (the link's share of the waiting) and how
// many there were.
func (c *Comm) recvStamps(ctx context.Context, s *schedule, h transport.Header, mine []int64) error {
	a := &c.attr
	p := c.Size()
	a.in = grow(a.in, a.layout(s.recvs, p))
	for q := range p {
		if lo, hi := a.perPeer[q], a.perPeer[p+q]; hi > lo {
			if err := c.recvExact(ctx, q, h, a.in[lo:hi]); err != nil {
				return fmt.Errorf("receiving stamps from rank %d: %w", q, err)
			}
		}
	}
	link, count := mine[stampHead:stampHead+p], mine[stampHead+p:]
	a.waited = grow(a.waited, p)
	clear(a.waited)
	for i := range s.recvs {
		q := s.recvs[i].peer
		sent := int64(binary.LittleEndian.Uint64(a.in[a.next(q, p):]))
		posted, done := a.postAt[i], a.doneAt[i]
		mine[stampBlocked] += done - posted
		a.waited[q] += time.Duration(done - posted)
		link[q] += max(0, done-max(sent, posted))
		count[q]++
	}
	return nil
}

// verdict is what one attributed call's gathered stamps say.
type verdict struct {
	base      int64 // a link's usual time per message, ns
	skew      time.Duration
	late      int
	link      Link
	linkDelay time.Duration
	culprit   Culprit
}

// judge reads the gathered rows of p ranks (stampHead+2p int64 each) and fills arrival (p)
// with each rank's start after the earliest. The late rank is the last to start. A link's
// time is what its messages took once both ends were ready; the slow link is the one whose
// time most exceeds as many messages at the lower median per-message time of the call's
// links, so that links that are merely busy (every link of a ring carries as many bytes) cancel
// out. The culprit is whichever of the two accounts for more waiting. scratch has room for
// p² values. judge is a pure function of its input: every rank reaches the same verdict.
func judge(table []int64, p int, arrival []time.Duration, scratch []int64) verdict {
	row := stampHead + 2*p
	v := verdict{late: -1, link: Link{-1, -1}}
	first := table[stampStart]
	for r := range p {
		first = min(first, table[r*row+stampStart])
	}
	for r := range p {
		arrival[r] = time.Duration(table[r*row+stampStart] - first)
		if arrival[r] > v.skew {
			v.skew, v.late = arrival[r], r
		}
	}
	per := scratch[:0]
	for r := range p {
		for j := range p {
			if k := table[r*row+stampHead+p+j]; k > 0 {
				per = append(per, table[r*row+stampHead+j]/k)
			}
		}
	}
	if len(per) > 0 {
		slices.Sort(per)
		base := per[(len(per)-1)/2]
		v.base = base
		for r := range p {
			for j := range p {
				k := table[r*row+stampHead+p+j]
				if k == 0 {
					continue
				}
				if excess := time.Duration(table[r*row+stampHead+j] - base*k); excess > v.linkDelay {
					v.link, v.linkDelay = Link{From: j, To: r}, excess
				}
			}
		}
	}
	switch {
	case v.skew == 0 && v.linkDelay == 0:
	case v.skew >= v.linkDelay:
		v.culprit = CulpritRank
	default:
		v.culprit = CulpritLink
	}
	return v
}

// waitedFor is how long rank r of the table waited for the late rank: the gap between their
// starts, at most the time r was blocked receiving.
func waitedFor(table []int64, p, r, late int) time.Duration {
	if late < 0 || late == r {
		return 0
	}
	row := stampHead + 2*p
	gap := table[late*row+stampStart] - table[r*row+stampStart]
	return time.Duration(max(0, min(gap, table[r*row+stampBlocked])))
}

// record judges the gathered table and publishes the call's stats and the running totals.
func (a *attribution) record(seq uint64, kind collKind, bytes, p, me int) {
	a.perMsg = grow(a.perMsg, p*p)
	a.mu.Lock()
	defer a.mu.Unlock()
	l := &a.last
	l.Arrival = grow(l.Arrival, p)
	v := judge(a.table, p, l.Arrival, a.perMsg)
	l.Waited = append(l.Waited[:0], a.waited...)
	l.Seq, l.Kind, l.Bytes = seq, kind.String(), bytes
	l.Start, l.Duration = time.Unix(0, a.start), time.Duration(a.end-a.start)
	l.Skew, l.LateRank, l.SlowLink, l.LinkDelay, l.Culprit = v.skew, v.late, v.link, v.linkDelay, v.culprit
	l.WaitedForLate = waitedFor(a.table, p, me, v.late)
	l.LinkWait = grow(l.LinkWait, p)
	row := stampHead + 2*p
	for j := range p {
		k := a.table[me*row+stampHead+p+j]
		l.LinkWait[j] = time.Duration(max(0, a.table[me*row+stampHead+j]-v.base*k))
	}

	w := &a.cum
	if len(w.ForRank) != p {
		w.ForRank, w.MadeWait, w.LinkDelay = make([]time.Duration, p), make([]time.Duration, p), make([]time.Duration, p*p)
	}
	w.Calls++
	for j, d := range l.LinkWait {
		w.ForRank[j] += d
	}
	if v.late >= 0 {
		w.ForRank[v.late] += l.WaitedForLate
		for r := range p {
			w.MadeWait[v.late] += waitedFor(a.table, p, r, v.late)
		}
	}
	if v.link.From >= 0 {
		w.LinkDelay[v.link.From*p+v.link.To] += v.linkDelay
	}
}
