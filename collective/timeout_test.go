package collective

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangWithout runs two barriers on every rank of j and then an allreduce on every rank except
// absent, each with the context ctxFor gives, and returns the allreduce errors by rank.
func hangWithout(t *testing.T, j *job, absent int, ctxFor func() (context.Context, context.CancelFunc)) []error {
	t.Helper()
	guard, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for i := 0; i < 2; i++ {
		j.mustRun(t, "barrier", func(c *Comm) error { return c.Barrier(guard) })
	}
	errs := make([]error, len(j.comms))
	var wg sync.WaitGroup
	for r, c := range j.comms {
		if r == absent {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := ctxFor()
			defer cancel()
			errs[r] = c.AllReduce(ctx, F32(make([]float32, 100)), Sum)
		}()
	}
	wg.Wait()
	return errs
}

// TestTimeoutNamesCallAndPeers leaves one rank out of an allreduce. The others must fail with a
// *TimeoutError naming the collective, its sequence number and the peers they waited for (or,
// if a peer timed out first, with its abort), and fail fast on every later call.
func TestTimeoutNamesCallAndPeers(t *testing.T) {
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	cancellable := func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
	deadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Millisecond)
	}
	tests := []struct {
		name    string
		timeout time.Duration
		ctx     func() (context.Context, context.CancelFunc)
		limit   time.Duration // TimeoutError.Limit
	}{
		{"Options.Timeout, background context", 30 * time.Millisecond, background, 30 * time.Millisecond},
		{"Options.Timeout, cancellable context", 30 * time.Millisecond, cancellable, 30 * time.Millisecond},
		{"context deadline, no Options.Timeout", NoTimeout, deadline, 0},
		{"context deadline shorter than Options.Timeout", time.Hour, deadline, 0},
	}
	for _, alg := range Algorithms() {
		for _, tc := range tests {
			for _, p := range []int{2, 3, 5} {
				absent := p - 1
				j := newMemJob(t, p, Options{Algorithm: alg, Timeout: tc.timeout})
				errs := hangWithout(t, j, absent, tc.ctx)
				timeouts := 0
				for r, err := range errs[:absent] {
					var te *TimeoutError
					switch {
					case errors.As(err, &te):
						timeouts++
						if te.Collective != "allreduce" || te.Seq != 2 || te.Limit != tc.limit || len(te.Waiting) == 0 ||
							!errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("%s %s p=%d rank %d: %+v", alg, tc.name, p, r, te)
						}
						if msg := err.Error(); !strings.HasPrefix(msg, "rank ") || !strings.Contains(msg, "allreduce #2") ||
							!strings.Contains(msg, "waiting for rank ") {
							t.Errorf("%s %s p=%d rank %d: message %q", alg, tc.name, p, r, msg)
						}
					case isAbort(err):
					default:
						t.Errorf("%s %s p=%d rank %d: err = %v, want a *TimeoutError or a peer's abort", alg, tc.name, p, r, err)
					}
					// Broken: the next call fails at once with the cause.
					err = j.comms[r].Barrier(context.Background())
					if err == nil || !strings.Contains(err.Error(), "earlier failure") {
						t.Errorf("%s %s p=%d rank %d: call after the timeout: err = %v", alg, tc.name, p, r, err)
					}
				}
				if timeouts == 0 {
					t.Errorf("%s %s p=%d: no rank timed out: %v", alg, tc.name, p, errs)
				}
			}
		}
	}
}

// TestTimeoutNamesTheMissingPeer: in a ring allreduce rank 0 receives from rank p-1 first, so
// when rank p-1 never calls, rank 0's error names it.
func TestTimeoutNamesTheMissingPeer(t *testing.T) {
	j := newMemJob(t, 4, Options{Algorithm: "ring", Timeout: 20 * time.Millisecond})
	errs := hangWithout(t, j, 3, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} })
	var te *TimeoutError
	if !errors.As(errs[0], &te) || strings.Join(te.Waiting, ",") != "rank 3" || te.Who != "rank 0" {
		t.Fatalf("rank 0: err = %v, want a timeout waiting for rank 3", errs[0])
	}
	// In a sub-communicator the peers carry their job ranks.
	j = newMemJob(t, 6, Options{Algorithm: "ring", Timeout: 20 * time.Millisecond})
	subs := splitJob(t, j, func(r int) (int, int) { return r % 2, -r }, map[int][]int{0: {4, 2, 0}, 1: {5, 3, 1}})
	errs = hangWithout(t, subs[1], 2, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} })
	if !errors.As(errs[0], &te) || strings.Join(te.Waiting, ",") != "rank 2 (job rank 1)" ||
		!strings.HasPrefix(errs[0].Error(), "rank 0 (job rank 5, color 1): allreduce #2 (ring): timed out after 20ms") {
		t.Fatalf("sub-communicator rank 0: err = %v", errs[0])
	}
}

// TestSlowPeerWithinLimit: a peer that comes late, but within the limit, is waited for, and a
// context deadline longer than Options.Timeout lets a call wait longer.
func TestSlowPeerWithinLimit(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		ctx     func() (context.Context, context.CancelFunc)
	}{
		{"default", 0, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"none", NoTimeout, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"context deadline past Options.Timeout", 10 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), hangGuard)
		}},
	}
	for _, tc := range tests {
		j := newMemJob(t, 3, Options{Algorithm: "butterfly", Timeout: tc.timeout})
		errs := j.run(func(c *Comm) error {
			if c.Rank() == 2 {
				time.Sleep(100 * time.Millisecond)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			return c.AllReduce(ctx, F32(make([]float32, 10)), Sum)
		})
		if err := errors.Join(errs...); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestNonBlockingTimeout: a request whose peer never joins completes with the timeout.
func TestNonBlockingTimeout(t *testing.T) {
	j := newMemJob(t, 2, Options{Algorithm: "ring", Timeout: 20 * time.Millisecond})
	ctx := context.Background()
	reqs := []*Request{j.comms[0].IAllReduce(ctx, F32(make([]float32, 10)), Sum), j.comms[0].IBarrier(ctx)}
	var te *TimeoutError
	if err := reqs[0].Wait(ctx); !errors.As(err, &te) || te.Seq != 0 {
		t.Fatalf("allreduce: err = %v, want a timeout of #0", err)
	}
	if err := reqs[1].Wait(ctx); !errors.As(err, &te) || !strings.Contains(err.Error(), "barrier #1") ||
		!strings.Contains(err.Error(), "earlier failure") {
		t.Fatalf("barrier queued behind it: err = %v", err)
	}
}

// TestDeadlineCtxReuse drives the Comm's reusable call context: a late timer of an earlier call
// does not end the next one, and a context that has ended is fresh when armed again.
func TestDeadlineCtxReuse(t *testing.T) {
	var d deadlineCtx
	d.init()
	d.arm(context.Background(), time.Millisecond)
	d.disarm()
	d.arm(context.Background(), time.Hour)
	time.Sleep(20 * time.Millisecond)
	if err := d.Err(); err != nil {
		t.Fatalf("an earlier call's timer ended the next call: %v", err)
	}
	if dl, ok := d.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Fatalf("Deadline() = %v, %v", dl, ok)
	}
	d.disarm()
	d.arm(context.Background(), 5*time.Millisecond)
	<-d.Done()
	if !errors.Is(d.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline = %v", d.Err())
	}
	d.disarm()
	d.arm(context.Background(), time.Hour)
	select {
	case <-d.Done():
		t.Fatal("re-armed context is already done")
	default:
	}
	d.cancelFn()
	if !errors.Is(d.Err(), context.Canceled) {
		t.Fatalf("Err after cancel = %v", d.Err())
	}
	d.disarm()
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, 7)
	d.arm(parent, time.Hour)
	if d.Value(key{}) != 7 {
		t.Fatal("Value does not reach the parent")
	}
	d.disarm()
	// A shorter limit than the pending timer's moves the timer; once no call runs, the timer
	// stops at its next wake-up.
	d.arm(context.Background(), 5*time.Millisecond)
	d.disarm()
	deadline := time.Now().Add(hangGuard)
	for {
		d.mu.Lock()
		pending := d.pending
		d.mu.Unlock()
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timer of an idle context never stopped")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTimeoutOverTCP: the limit also stops a call blocked in a network endpoint.
func TestTimeoutOverTCP(t *testing.T) {
	j := newJob(t, tcpEndpoints(t, 3), Options{Algorithm: "ring", Timeout: 50 * time.Millisecond})
	errs := hangWithout(t, j, 1, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} })
	var te *TimeoutError
	if !errors.As(errs[2], &te) && !errors.As(errs[0], &te) {
		t.Fatalf("no timeout: %v", errs)
	}
}

// TestPointToPointTimeout: a Recv whose peer never sends ends at the limit, naming the peer.
func TestPointToPointTimeout(t *testing.T) {
	j := newMemJob(t, 3, Options{Algorithm: "ring", Timeout: 20 * time.Millisecond})
	err := j.comms[0].Recv(context.Background(), 2, F32(make([]float32, 3)))
	var te *TimeoutError
	if !errors.As(err, &te) || te.Collective != "recv" || strings.Join(te.Waiting, ",") != "rank 2" ||
		!strings.HasPrefix(err.Error(), "rank 0: recv #0 (ring): timed out after 20ms") {
		t.Fatalf("recv: err = %v", err)
	}
	// Point-to-point failures leave the collectives usable.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	j.mustRun(t, "barrier after a recv timeout", func(c *Comm) error { return c.Barrier(ctx) })
}

// TestCancelDuringCall: cancelling the caller's context ends a running call with
// context.Canceled (no timeout), a context cancelled between calls ends the next call at once,
// and a context the Comm watched ends no call made with another context.
func TestCancelDuringCall(t *testing.T) {
	guard, stopGuard := context.WithTimeout(context.Background(), hangGuard)
	defer stopGuard()
	j := newMemJob(t, 2, Options{Algorithm: "ring"})
	first, cancelFirst := context.WithCancel(context.Background())
	j.mustRun(t, "allreduce", func(c *Comm) error { return c.AllReduce(first, I32(make([]int32, 3)), Sum) })
	// Rank 0's next call uses another context while the first one ends.
	cancelFirst()
	j.mustRun(t, "barrier", func(c *Comm) error { return c.Barrier(context.Background()) })
	// Cancelled while idle: the next call with it fails at once.
	if err := j.comms[0].AllReduce(first, I32(make([]int32, 3)), Sum); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a cancelled context: err = %v", err)
	}
	// Cancelled during a call whose peer never comes (the limit only turns a missed
	// cancellation into a failure instead of a hang).
	j = newMemJob(t, 2, Options{Algorithm: "ring", Timeout: hangGuard})
	j.mustRun(t, "barrier", func(c *Comm) error { return c.Barrier(guard) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := j.comms[0].AllReduce(ctx, I32(make([]int32, 3)), Sum)
	var te *TimeoutError
	if !errors.Is(err, context.Canceled) || errors.As(err, &te) || !strings.Contains(err.Error(), "allreduce #1") {
		t.Fatalf("cancelled call: err = %v", err)
	}
}
