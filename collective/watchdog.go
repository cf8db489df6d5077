package collective

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// Watch configures what a Comm reports about its own calls while they run.
type Watch struct {
	// StallAfter: once a call has waited this long, the rank logs (at Warn) which peers it is
	// waiting for, what each of them last did as its heartbeats said, and how long ago; and
	// again every StallAfter while the call still waits, as Horovod's stall inspector does.
	// 0 means DefaultStallAfter, a negative value never.
	StallAfter time.Duration
	// Logger receives the stall reports; nil means slog.Default().
	Logger *slog.Logger
	// Timeline, when not nil, records every call, message and wait of the Comm (trace.go).
	Timeline *Timeline
}

// DefaultStallAfter is Watch.StallAfter when it is 0: longer than any call of a healthy job
// on a loaded host, shorter than the peer timeout of the p2p transport, so that a frozen
// peer is first reported as what the ranks wait for, then failed.
const DefaultStallAfter = 5 * time.Second

// watchdog reports calls that wait too long. It costs a call two atomic stores and a clock
// read: its timer runs only while calls are being made, waking every StallAfter/2, and stops
// at the first wake-up that finds the Comm idle, as deadlineCtx's does.
type watchdog struct {
	after time.Duration
	log   *slog.Logger
	act   *transport.Activity // the endpoint's record, which its heartbeats report
	live  transport.Liveness  // the job's endpoint's, nil when it has none

	timer    *time.Timer
	pending  atomic.Bool   // the timer will fire
	start    atomic.Int64  // unix ns when the running call started, 0 when none runs
	seq      atomic.Uint64 // the running call
	kind     atomic.Uint32
	reports  atomic.Int64 // reports made for call `reported`
	reported atomic.Uint64
}

// Watch is what the Comm was configured to report, for communicators that should report
// alike (the same log, the same timeline).
func (c *Comm) Watch() Watch { return c.opts.Watch }

// initWatch sets up the watchdog of c from its options.
func (c *Comm) initWatch() {
	w := &c.watch
	w.after = c.opts.Watch.StallAfter
	if w.after == 0 {
		w.after = DefaultStallAfter
	}
	w.log = c.opts.Watch.Logger
	if w.log == nil {
		w.log = slog.Default()
	}
	w.live, _ = transport.LivenessOf(c.base)
	if w.live != nil {
		w.act = w.live.Activity()
	} else {
		w.act = new(transport.Activity)
	}
	if w.after > 0 {
		w.timer = time.AfterFunc(time.Hour, c.checkStall)
		w.timer.Stop()
	}
}

// callStarted records that call seq of kind started.
func (c *Comm) callStarted(seq uint64, kind collKind) {
	w := &c.watch
	now := time.Now()
	w.act.Start(seq, uint8(kind), now)
	w.seq.Store(seq)
	w.kind.Store(uint32(kind))
	w.start.Store(now.UnixNano())
	if w.after > 0 && !w.pending.Load() && w.pending.CompareAndSwap(false, true) {
		w.timer.Reset(w.after / 2)
	}
}

// callEnded records that call seq ended.
func (c *Comm) callEnded(seq uint64, kind collKind, bytes int, err error) {
	w := &c.watch
	now := time.Now()
	w.act.Done(seq, now)
	start := w.start.Swap(0)
	if tl := c.opts.Watch.Timeline; tl != nil {
		tl.call(c, seq, kind, bytes, time.Unix(0, start), now, err)
	}
}

// checkStall is the timer's function: it reports the running call when it has waited another
// StallAfter, and stops the timer when no call runs.
func (c *Comm) checkStall() {
	w := &c.watch
	start := w.start.Load()
	if start == 0 {
		w.pending.Store(false)
		// A call may have started after the load and seen the timer still pending.
		if w.start.Load() == 0 || !w.pending.CompareAndSwap(false, true) {
			return
		}
		start = w.start.Load()
	}
	seq := w.seq.Load()
	if w.reported.Swap(seq) != seq {
		w.reports.Store(0)
	}
	if waited := time.Since(time.Unix(0, start)); start != 0 && waited >= time.Duration(w.reports.Load()+1)*w.after {
		w.reports.Add(1)
		w.log.Warn(c.stallReport(seq, collKind(w.kind.Load()), waited), "rank", c.Rank(), "seq", seq)
	}
	w.timer.Reset(w.after / 2)
}

// stallReport says what call seq waits for: each peer it is receiving from or sending to,
// when that peer was last heard and what it last did.
func (c *Comm) stallReport(seq uint64, kind collKind, waited time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v #%d (%s) has waited %v", c.who, kind, seq, c.algName, waited.Round(time.Millisecond))
	var peers []int
	for _, p := range []*atomic.Int32{&c.recvPeer, &c.sendPeer} {
		if r := int(p.Load()); r >= 0 && r < c.Size() && (len(peers) == 0 || peers[0] != r) {
			peers = append(peers, r)
		}
	}
	if len(peers) == 0 {
		b.WriteString(", between messages (reducing, or waiting for its turn)")
	}
	for i, r := range peers {
		sep := "; "
		if i == 0 {
			sep = " for "
		}
		fmt.Fprintf(&b, "%s%s", sep, c.peerName(r))
		if w := &c.watch; w.live != nil {
			b.WriteString(describePeer(w.live.Peer(c.jobRank(r)), time.Now()))
		}
	}
	return b.String()
}

// describePeer is what this rank knows of a peer from its heartbeats, for a stall report.
func describePeer(st transport.PeerState, now time.Time) string {
	switch {
	case st.Failed != nil:
		return fmt.Sprintf(" (failed: %v)", st.Failed)
	case st.Left:
		return " (left the job)"
	case st.Heard.IsZero():
		return " (no heartbeat heard yet)"
	}
	s := fmt.Sprintf(" (last heard %v ago", now.Sub(st.Heard).Round(time.Millisecond))
	switch {
	case st.Op == 0:
		s += ", no collective call yet"
	case st.Done:
		s += fmt.Sprintf(", last completed %v #%d %v ago", collKind(st.Op), st.Seq, now.Sub(st.At).Round(time.Millisecond))
	default:
		s += fmt.Sprintf(", in %v #%d for %v", collKind(st.Op), st.Seq, now.Sub(st.At).Round(time.Millisecond))
	}
	return s + ")"
}
