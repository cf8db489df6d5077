package collective

import (
	"context"
	"errors"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// slotEndpoint is an allocation-free in-process transport for the allocation test: every
// (sender, receiver) pair has a fixed set of preallocated slots, handed over through channels.
type slotEndpoint struct {
	rank int
	job  *slotJob
}

type slot struct {
	h   transport.Header
	n   int
	buf []byte
}

type slotJob struct {
	p     int
	full  []chan *slot // index from*p+to: messages in flight
	empty []chan *slot // free slots of that pair
}

func newSlotJob(p, slots, maxBytes int) []transport.Endpoint {
	j := &slotJob{p: p, full: make([]chan *slot, p*p), empty: make([]chan *slot, p*p)}
	for i := range j.full {
		j.full[i] = make(chan *slot, slots)
		j.empty[i] = make(chan *slot, slots)
		for k := 0; k < slots; k++ {
			j.empty[i] <- &slot{buf: make([]byte, maxBytes)}
		}
	}
	eps := make([]transport.Endpoint, p)
	for r := range eps {
		eps[r] = &slotEndpoint{rank: r, job: j}
	}
	return eps
}

var errSlotTooBig = errors.New("slot endpoint: message too big")

func (e *slotEndpoint) Rank() int { return e.rank }
func (e *slotEndpoint) Size() int { return e.job.p }
func (e *slotEndpoint) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	i := e.rank*e.job.p + to
	var s *slot
	select {
	case s = <-e.job.empty[i]:
	case <-ctx.Done():
		return ctx.Err()
	}
	if len(payload) > len(s.buf) {
		return errSlotTooBig
	}
	s.h, s.n = h, copy(s.buf, payload)
	e.job.full[i] <- s
	return nil
}
func (e *slotEndpoint) RecvAny(ctx context.Context, from int, ch transport.Channel, buf []byte) (transport.Header, int, error) {
	i := from*e.job.p + e.rank
	var s *slot
	select {
	case s = <-e.job.full[i]:
	case <-ctx.Done():
		return transport.Header{}, 0, ctx.Err()
	}
	h, n := s.h, copy(buf, s.buf[:s.n])
	e.job.empty[i] <- s
	return h, n, nil
}
func (e *slotEndpoint) Recv(ctx context.Context, from int, want transport.Header, buf []byte) (int, error) {
	h, n, err := e.RecvAny(ctx, from, want.Channel, buf)
	if err == nil {
		err = transport.CheckHeader(e.rank, from, want, h)
	}
	return n, err
}
func (e *slotEndpoint) Stats() transport.Stats { return transport.Stats{} }
func (e *slotEndpoint) Close() error           { return nil }

// TestNoAllocationPerMessage checks that a steady-state call allocates at most a small
// constant per rank (nothing for these calls, whose messages are small enough to run on the
// caller's goroutine), however many segments it moves, whether the Comm's timeout or the context's deadline limits it, and
// whether the context can be cancelled.
func TestNoAllocationPerMessage(t *testing.T) {
	const p, n = 4, 1 << 14
	cancellable, stop := context.WithCancel(context.Background())
	defer stop()
	perCall := func(ctx context.Context, alg string, segBytes int, z Compression) float64 {
		// Enough slots that no send ever waits: every message of a call can be in flight.
		slots, slotBytes := 8*(4*n/segBytes+1), min(segBytes, 4*n)
		j := newJob(t, newSlotJob(p, slots, slotBytes), Options{Algorithm: alg, SegmentBytes: segBytes, Compression: z})
		bufs := make([][]float32, p)
		start := make([]chan struct{}, p)
		done := make(chan error, p)
		for r := range bufs {
			bufs[r] = make([]float32, n)
			start[r] = make(chan struct{})
			go func() {
				for range start[r] {
					done <- j.comms[r].AllReduce(ctx, F32(bufs[r]), Sum)
				}
			}()
		}
		defer func() {
			for _, s := range start {
				close(s)
			}
		}()
		call := func() {
			for _, s := range start {
				s <- struct{}{}
			}
			for range start {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		}
		call() // build and cache the schedule
		return testing.AllocsPerRun(20, call) / p
	}
	for _, alg := range []string{"ring", "butterfly", "binary-blocks", "ps"} {
		// The deadline is set afresh for each algorithm: the whole test may take longer than
		// hangGuard under the race detector on a loaded machine, one algorithm never does.
		withDeadline, cancel := context.WithTimeout(context.Background(), hangGuard)
		for _, limit := range []struct {
			name string
			ctx  context.Context
		}{{"Options.Timeout", context.Background()}, {"context deadline", withDeadline}, {"cancellable context", cancellable}} {
			few := perCall(limit.ctx, alg, 1<<20, Compression{}) // one segment per range
			many := perCall(limit.ctx, alg, 256, Compression{})  // 64 elements per segment: hundreds of messages
			t.Logf("%s, %s: %.1f allocations per call and rank with few segments, %.1f with many", alg, limit.name, few, many)
			if many > few+1 || many > 6 {
				t.Errorf("%s: %.1f allocations per call and rank with many segments vs %.1f with few: something allocates per message",
					alg, many, few)
			}
		}
		cancel()
	}
	// A compressed call encodes and decodes through the Comm's own wire buffers.
	for _, codec := range lossyCodecs {
		z := Compression{Codec: codec}
		few, many := perCall(context.Background(), "ring", 1<<20, z), perCall(context.Background(), "ring", 256, z)
		t.Logf("ring, %s: %.1f allocations per call and rank with few segments, %.1f with many", codec.Name(), few, many)
		if many > few+1 || many > 6 {
			t.Errorf("ring, %s: %.1f allocations per call and rank with many segments vs %.1f with few: something allocates per message",
				codec.Name(), many, few)
		}
	}
}
