package transport

import (
	"context"
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
// (the tc-netem injection of Sync-Switch's experiments, which this kernel lacks). Receives
// and everything outside the windows pass straight through.
//
// The send blocks the caller for Delay instead of delivering later in the background: each
// message of a collective's dependent chain is then Delay late, as with added latency, and
// the FIFO order per peer is kept without copying payloads.
//
// The windows count from the epoch: the first Send on a channel other than ChanControl (the
// first training message after the runtime's start barrier), unless Start sets it.
type Delayed struct {
	Endpoint
	delay   time.Duration
	windows []DelayWindow
	epoch   atomic.Int64 // unix nanoseconds; 0 until the first data message or Start
	now     func() time.Time
	timers  sync.Pool
	delayed atomic.Uint64
}

// NewDelayed decorates ep. The windows must be sorted by From.
func NewDelayed(ep Endpoint, delay time.Duration, windows []DelayWindow) *Delayed {
	return &Delayed{Endpoint: ep, delay: delay, windows: append([]DelayWindow(nil), windows...), now: time.Now}
}

// Start sets the epoch the windows count from.
func (d *Delayed) Start(t time.Time) { d.epoch.Store(t.UnixNano()) }

// SameHost passes the decorated endpoint's proven hosts through (HostLocality): a delayed rank
// is still where it runs.
func (d *Delayed) SameHost() []bool { return SameHost(d.Endpoint) }

// Unwrap is the decorated endpoint (Decorator), so that what it implements beyond Endpoint
// (the heartbeats' Liveness) stays reachable through the straggler's decoration.
func (d *Delayed) Unwrap() Endpoint { return d.Endpoint }

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
	if h.Channel != ChanControl && d.epoch.Load() == 0 {
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
