package transport

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DelayWindow is a time window [From, To) measured from a Delayed endpoint's epoch.
type DelayWindow struct {
	From, To time.Duration
}

// Delayed is an Endpoint decorator that simulates a transient network straggler: inside its
// windows every Send first waits Delay, so the rank's outgoing messages arrive that much later
// (what tc-netem injects in Sync-Switch's experiments, done in the process). Receives
// and everything outside the windows pass straight through.
//
// The send blocks the caller for Delay instead of delivering later in the background: each
// message of a collective's dependent chain is then Delay late, as with added latency, and
// the FIFO order per peer is kept without copying payloads.
//
// The windows count from the epoch: the first Send on a channel other than the untimed ones
// its caller names (a runtime's own control traffic before training starts), unless Start
// sets it.
type Delayed struct {
	Endpoint
	delay   time.Duration
	windows []DelayWindow
	untimed []Channel
	epoch   atomic.Int64 // unix nanoseconds; 0 until the first timed message or Start
	now     func() time.Time
	timers  sync.Pool
	delayed atomic.Uint64
}

// NewDelayed decorates ep. The windows must be sorted by From; a send on an untimed channel
// does not start their clock.
func NewDelayed(ep Endpoint, delay time.Duration, windows []DelayWindow, untimed []Channel) *Delayed {
	return &Delayed{Endpoint: ep, delay: delay, windows: append([]DelayWindow(nil), windows...),
		untimed: append([]Channel(nil), untimed...), now: time.Now}
}

// Start sets the epoch the windows count from.
func (d *Delayed) Start(t time.Time) { d.epoch.Store(t.UnixNano()) }

// Unwrap is the decorated endpoint (Decorator): what it implements beyond Endpoint (its
// heartbeats' Liveness, its proven hosts, the receives a Borrower lends, which the delays
// leave alone) stays reachable through the straggler's decoration (As).
func (d *Delayed) Unwrap() Endpoint { return d.Endpoint }

// Arena is nil (ArenaHolder): a delayed rank's messages must travel its delayed sends, which
// collectives through the host's shared arena would bypass, so the decoration hides the arena
// of the endpoint beneath it.
func (d *Delayed) Arena() Arena { return nil }

// DelayedSends is the number of sends delayed so far.
func (d *Delayed) DelayedSends() uint64 { return d.delayed.Load() }

// DelayAt is the delay of a send at instant t.
func (d *Delayed) DelayAt(t time.Time) time.Duration {
	e := d.epoch.Load()
	if e == 0 {
		return 0
	}
	since := time.Duration(t.UnixNano() - e)
	for _, w := range d.windows {
		if since >= w.From && since < w.To {
			return d.delay
		}
	}
	return 0
}

// Send waits the delay in force, then sends.
func (d *Delayed) Send(ctx context.Context, to int, h Header, payload []byte) error {
	now := d.now()
	if d.epoch.Load() == 0 && !slices.Contains(d.untimed, h.Channel) {
		d.epoch.CompareAndSwap(0, now.UnixNano())
	}
	if wait := d.DelayAt(now); wait > 0 {
		d.delayed.Add(1)
		t, _ := d.timers.Get().(*time.Timer)
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		select {
		case <-t.C:
			d.timers.Put(t)
		case <-ctx.Done():
			t.Stop()
			return &PeerError{Rank: d.Rank(), Peer: to, Op: "send (delayed)", Err: ctx.Err()}
		}
	}
	return d.Endpoint.Send(ctx, to, h, payload)
}
