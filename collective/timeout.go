package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeout is how long a collective call may run when Options.Timeout is 0 and the
// call's context has no deadline. A call legitimately waits for the slowest rank to finish the
// computation before it (a straggler's step, an evaluation pass or a checkpoint on one rank), so
// the limit sits far above any step; it exists so that a rank that died or took another branch
// stops the job with an error naming the call and the ranks it waited for, rather than holding
// the cluster forever. torch.distributed and Gloo use the same default.
const DefaultTimeout = 30 * time.Minute

// NoTimeout as Options.Timeout lets a call whose context has no deadline wait forever.
const NoTimeout time.Duration = -1

// TimeoutError is a collective call that did not complete within its time limit: its context's
// deadline, or Options.Timeout when the context has none. The communicator is unusable after
// it, as after any failure.
type TimeoutError struct {
	Who        string // this rank: "rank 2", or a sub-communicator rank with its job rank
	Collective string
	Seq        uint64
	Algorithm  string
	// Limit is Options.Timeout when that was the limit, 0 when it was the context's deadline.
	Limit time.Duration
	// Waiting is the ranks of the communicator that the call was waiting on when the time
	// ran out (to receive from, or to take what it was sending).
	Waiting []string
	Err     error
}

func (e *TimeoutError) Error() string {
	limit := "its context's deadline passed"
	if e.Limit > 0 {
		limit = fmt.Sprintf("timed out after %v (Options.Timeout; a context deadline or a larger Timeout allows longer)", e.Limit)
	}
	waiting := "no peer"
	if len(e.Waiting) > 0 {
		waiting = strings.Join(e.Waiting, ", ")
	}
	return fmt.Sprintf("%s: %s #%d (%s): %s waiting for %s: %v", e.Who, e.Collective, e.Seq, e.Algorithm, limit, waiting, e.Err)
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// timeout is the Comm's limit for calls whose context has no deadline; 0 means none.
func (c *Comm) timeout() time.Duration {
	switch {
	case c.opts.Timeout == 0:
		return DefaultTimeout
	case c.opts.Timeout < 0:
		return 0
	}
	return c.opts.Timeout
}

// limit returns the context a call runs under and what ends it. A context with a deadline is
// the call's own limit and is used as it is. Any other gets the Comm's reusable deadlineCtx, so
// that a call pays no allocation for its limit.
func (c *Comm) limit(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	d := c.timeout()
	if _, ok := ctx.Deadline(); ok || d == 0 {
		return ctx, noCancel, 0
	}
	c.dctx.arm(ctx, d)
	return &c.dctx, c.dctx.disarmFn, d
}

func noCancel() {}

// callErr is the error of failed call seq: a *TimeoutError when its time ran out.
func (c *Comm) callErr(ctx context.Context, kind collKind, seq uint64, limit time.Duration, err error) error {
	if !timedOut(ctx, err) {
		if s := c.mismatchSentence(err, c.cur); s != "" {
			return fmt.Errorf("%s: %v #%d (%s): %s: %w", c.who, kind, seq, c.algName, s, err)
		}
		return fmt.Errorf("%s: %v #%d (%s): %w", c.who, kind, seq, c.algName, err)
	}
	var waiting []string
	for _, p := range []*atomic.Int32{&c.recvPeer, &c.sendPeer} {
		if r := int(p.Load()); r >= 0 && r < c.Size() {
			if name := c.peerName(r); !slices.Contains(waiting, name) {
				waiting = append(waiting, name)
			}
		}
	}
	return &TimeoutError{Who: c.who, Collective: kind.String(), Seq: seq, Algorithm: c.algName,
		Limit: limit, Waiting: waiting, Err: err}
}

// timedOut says whether a call under ctx failed because its deadline passed. The deadline may
// pass just after the call failed for another reason (a peer's abort): that is no timeout.
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() == context.DeadlineExceeded && errors.Is(err, context.DeadlineExceeded)
}

// p2pLimit is limit for Send and Recv, which run beside the collectives and so cannot use the
// Comm's reusable context: without a deadline they pay for a context.WithTimeout.
func (c *Comm) p2pLimit(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	d := c.timeout()
	if _, ok := ctx.Deadline(); ok || d == 0 {
		return ctx, noCancel, 0
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, cancel, d
}

// p2pErr is the error of point-to-point message seq with peer: a *TimeoutError when its time
// ran out. A point-to-point failure does not break the communicator's collectives.
func (c *Comm) p2pErr(ctx context.Context, what string, seq uint64, peer int, limit time.Duration, err error) error {
	if !timedOut(ctx, err) {
		return fmt.Errorf("%s: %s #%d with rank %d: %w", c.who, what, seq, peer, err)
	}
	return &TimeoutError{Who: c.who, Collective: what, Seq: seq, Algorithm: c.algName,
		Limit: limit, Waiting: []string{c.peerName(peer)}, Err: err}
}

// peerName names rank r of the communicator, with its job rank in a sub-communicator.
func (c *Comm) peerName(r int) string {
	if c.jobRanks == nil {
		return fmt.Sprintf("rank %d", r)
	}
	return fmt.Sprintf("rank %d (job rank %d)", r, c.jobRanks[r])
}

// deadlineCtx is the context of a call whose own context has no deadline: it ends at the call's
// deadline, when the caller's context ends, or when the executor cancels the call. The Comm
// keeps one and re-arms it for every such call (the call that has the turn owns it), so a call
// allocates nothing for its limit; its Done channel is replaced only after it has been closed,
// that is after a failed call.
//
// Arming and disarming only write the deadline: the timer is not stopped and reset per call,
// which would cost more than the rest of a call's bookkeeping. It runs while calls are being
// made, waking at most every deadlineCheck to move itself to the running call's deadline, and
// stops at the first wake-up that finds no call running, so an idle Comm holds no timer. A
// caller's context that can end is watched (context.AfterFunc) from its first call until the
// timer stops or another context comes, so a program that passes one context to every call
// registers it once per burst of calls, not per call.
type deadlineCtx struct {
	parent   context.Context
	timer    *time.Timer
	disarmFn context.CancelFunc
	cancelFn context.CancelFunc

	mu        sync.Mutex
	watched   context.Context // the caller's context whose end ends the running call
	stopWatch func() bool     // stops watching it
	armed     bool            // a call is running under this context
	pending   bool            // the timer will fire
	fireAt    time.Time       // when, if pending
	deadline  time.Time
	done      chan struct{}
	err       error
}

// deadlineCheck is the longest the timer sleeps; a Comm stays referenced by its timer for at
// most this long after its last call.
const deadlineCheck = time.Minute

func (d *deadlineCtx) init() {
	d.parent = context.Background()
	d.done = make(chan struct{})
	d.disarmFn = d.disarm
	d.cancelFn = func() { d.end(context.Canceled) }
}

// arm starts a call that may run for t.
func (d *deadlineCtx) arm(parent context.Context, t time.Duration) {
	now := time.Now()
	d.mu.Lock()
	d.parent, d.armed, d.deadline = parent, true, now.Add(t)
	if d.err != nil {
		d.done, d.err = make(chan struct{}), nil
	}
	if parent.Done() != nil && parent != d.watched {
		d.unwatch()
		d.watched, d.stopWatch = parent, context.AfterFunc(parent, func() { d.parentEnded(parent) })
	}
	if err := parent.Err(); err != nil {
		// Ended while no call was running: parentEnded let it pass.
		d.err = err
		close(d.done)
	}
	// A pending timer that fires by this call's deadline is left alone (with the Comm's one
	// limit, always); expire then moves it on. The timer is set under mu, so that expire, which
	// takes mu, sees it.
	if !d.pending || d.fireAt.After(d.deadline) {
		d.setTimer(now, t)
	}
	d.mu.Unlock()
}

// setTimer makes the timer fire after min(t, deadlineCheck); d.mu is held.
func (d *deadlineCtx) setTimer(now time.Time, t time.Duration) {
	t = min(t, deadlineCheck)
	d.pending, d.fireAt = true, now.Add(t)
	if d.timer == nil {
		d.timer = time.AfterFunc(t, d.expire)
	} else {
		d.timer.Reset(t)
	}
}

// disarm ends the call.
func (d *deadlineCtx) disarm() {
	d.mu.Lock()
	d.armed = false
	d.mu.Unlock()
}

// expire is the timer's function: it ends the running call if its deadline has passed, else
// sleeps again until that deadline (or deadlineCheck), and lets the timer stop when no call
// runs.
func (d *deadlineCtx) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.armed {
		d.pending = false
		d.unwatch()
		return
	}
	now := time.Now()
	if left := d.deadline.Sub(now); left > 0 {
		d.setTimer(now, left)
		return
	}
	d.pending = false
	if d.err == nil {
		d.err = context.DeadlineExceeded
		close(d.done)
	}
}

// parentEnded is called when the watched context parent has ended: it ends the running call
// if the call runs under parent. The function runs on a goroutine of its own, which may take
// mu only after the call of parent returned and a later call armed d with another context (a
// program that cancels each call's context once the call returned): that call is left alone,
// since ending it would end it with no error, parent being no longer what d watches.
func (d *deadlineCtx) parentEnded(parent context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed && d.err == nil && d.watched == parent && d.parent == parent {
		d.err = parent.Err()
		close(d.done)
	}
}

// unwatch stops watching the caller's context; d.mu is held.
func (d *deadlineCtx) unwatch() {
	if d.stopWatch != nil {
		d.stopWatch()
	}
	d.watched, d.stopWatch = nil, nil
}

// end ends the call now with err, unless it has ended already.
func (d *deadlineCtx) end(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.err = err
		close(d.done)
	}
}

func (d *deadlineCtx) Deadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deadline, true
}

func (d *deadlineCtx) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

func (d *deadlineCtx) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *deadlineCtx) Value(key any) any { return d.parent.Value(key) }
