package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// arenaSizes are the arenas the tests run on: one so small that every call of a few hundred
// bytes runs as many chunks, and one of the least a p2p job's default arena takes
// ((p + 4) MiB, slots of 256 KiB to 1 MiB).
func arenaSizes(p int) []int {
	if p > 9 {
		return []int{64 << 10, (p + 4) << 20}
	}
	return []int{8 << 10, (p + 4) << 20}
}

func newArenaJob(t testing.TB, p, bytes int) *job {
	t.Helper()
	return everyCallThroughArena(t, newJob(t, transport.NewMemJobArena(p, bytes), Options{}))
}

// everyCallThroughArena makes every call of j's Comms that may take the arena take it,
// whatever the rank count and size.
func everyCallThroughArena(t testing.TB, j *job) *job {
	t.Helper()
	for _, c := range j.comms {
		if c.Size() > 1 && c.arena == nil {
			t.Fatalf("p=%d: the Comm has no arena", c.Size())
		}
		if c.arena != nil {
			c.arena.minRanks, c.arena.fewRanksBytes, c.arena.broadcastBytes = 0, 0, 0
		}
	}
	return j
}

// TestArenaCollectivesMem runs every collective, blocking and not, on jobs whose allreduces
// go through the arena: the allreduces mix with the schedule path's calls in one sequence.
func TestArenaCollectivesMem(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, bytes := range arenaSizes(p) {
			t.Run(fmt.Sprintf("p=%d/arena=%d", p, bytes), func(t *testing.T) {
				t.Parallel()
				exercise(t, newArenaJob(t, p, bytes), "auto+arena")
				exerciseNonBlocking(t, newArenaJob(t, p, bytes), "auto+arena")
			})
		}
	}
}

// rankOrder reduces the ranks' inputs in rank order in the type's own arithmetic: what the
// arena computes, bit for bit.
func rankOrder(dt DType, op ReduceOp, p, n int) Buffer {
	out := input(dt, 0, n)
	for r := 1; r < p; r++ {
		reduceBytes(dt, op, out.Bytes, input(dt, r, n).Bytes)
	}
	if op == Avg && p > 1 {
		average(out, p)
	}
	return out
}

// TestArenaAllReduceRankOrder checks every dtype and op at lengths around the chunk and the
// one-phase limit, up to 64 ranks, bitwise against the rank-order reduction.
func TestArenaAllReduceRankOrder(t *testing.T) {
	for _, p := range []int{2, 3, 5, 8, 9, 32, 64} {
		for _, bytes := range arenaSizes(p) {
			t.Run(fmt.Sprintf("p=%d/arena=%d", p, bytes), func(t *testing.T) {
				t.Parallel()
				j := newArenaJob(t, p, bytes)
				ch := j.comms[0].arena.chunk
				ops := []ReduceOp{Sum, Avg, Min, Max, Prod}
				if raceEnabled {
					// Min and Max take the path Prod takes; the race detector needs one.
					ops = []ReduceOp{Sum, Avg, Prod}
				}
				for _, dt := range allDTypes {
					es := dt.Size()
					ns := []int{0, 1, p - 1, 7, 1009, arenaSmallBytes / es, arenaSmallBytes/es + 1, ch / es, ch/es + 1, 2*ch/es + 5}
					if p > 9 {
						ns = ns[:7]
					}
					for _, n := range ns {
						for _, op := range ops {
							bufs := make([]Buffer, p)
							name := fmt.Sprintf("p=%d %v n=%d %v", p, dt, n, op)
							ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
							j.mustRun(t, name, func(c *Comm) error {
								bufs[c.Rank()] = input(dt, c.Rank(), n)
								return c.AllReduce(ctx, bufs[c.Rank()], op)
							})
							cancel()
							want := rankOrder(dt, op, p, n)
							for r := range bufs {
								if string(bufs[r].Bytes) != string(want.Bytes) {
									t.Fatalf("%s: rank %d differs from the rank-order reduction (%v)", name, r, compare(bufs[r], want, 0, n))
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestArenaBarrier: nobody leaves a barrier before the last rank entered it.
func TestArenaBarrier(t *testing.T) {
	for _, p := range []int{2, 3, 9, 32} {
		j := newArenaJob(t, p, (p+4)<<20)
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		var entered atomic.Int32
		errs := j.run(func(c *Comm) error {
			for round := range 5 {
				if c.Rank() == round%p {
					time.Sleep(5 * time.Millisecond)
				}
				entered.Add(1)
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if got := entered.Load(); got < int32((round+1)*p) {
					return fmt.Errorf("left barrier %d with %d of %d entries", round, got, (round+1)*p)
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("p=%d rank %d: %v", p, r, err)
			}
		}
	}
}

// The default arena (transport.ArenaBytesFor) holds this package's whole layout at full slots:
// the two describe one layout from two layers, and a change to one must not shrink the chunks.
func TestArenaDefaultSizeHoldsTheLayout(t *testing.T) {
	for _, p := range []int{2, 3, 4, 8, 16, 17, 32, 64, 1000, 8000, 1 << 16} {
		_, chunk := arenaLayout(int(transport.ArenaBytesFor(p)), p)
		if want := transport.ArenaSlotBytes(p); chunk != want {
			t.Errorf("%d ranks: an arena of transport.ArenaBytesFor = %d bytes holds slots of %d bytes, want transport.ArenaSlotBytes = %d",
				p, transport.ArenaBytesFor(p), chunk, want)
		}
	}
}

// Which kinds of call take the arena, on 4 ranks with one.
func TestArenaTakesKinds(t *testing.T) {
	j := newJob(t, transport.NewMemJobArena(4, 1<<20), Options{})
	c := j.comms[1]
	for _, tc := range []struct {
		kind  collKind
		bytes int
		want  bool
	}{
		{kindAllReduce, 4, true},
		{kindBarrier, 0, true},
		{kindReduceScatter, 4096, true},
		{kindAllGather, 4096, true},
		{kindBroadcast, arenaBroadcastBytes - 4, false},
		{kindBroadcast, arenaBroadcastBytes, true},
		{kindReduce, 4 << 20, false},
		{kindAllToAll, 4 << 20, false},
	} {
		if got := c.arenaTakes(tc.kind, tc.bytes); got != tc.want {
			t.Errorf("%v of %d bytes: arenaTakes %v, want %v", tc.kind, tc.bytes, got, tc.want)
		}
	}
}

func TestArenaChoice(t *testing.T) {
	tests := []struct {
		name  string
		p     int
		bytes int
		n     int // float32 elements
		opts  Options
		want  string // "" for anything but the arena
	}{
		{"auto with an arena", 8, 1 << 20, 1000, Options{}, "arena"},
		{"many ranks", 32, 64 << 20, 1, Options{}, "arena"},
		{"three ranks, small", 3, 1 << 20, 1, Options{}, "arena"},
		{"two ranks, small", 2, 1 << 20, 1000, Options{}, ""},
		{"two ranks, large", 2, 1 << 20, arenaFewRanksBytes / 4, Options{}, "arena"},
		{"two ranks, just below", 2, 1 << 20, arenaFewRanksBytes/4 - 1, Options{}, ""},
		{"auto without one", 8, 0, 1000, Options{}, ""},
		{"one rank", 1, 1 << 20, 1 << 24, Options{}, ""},
		{"arena too small", 9, 4096, 1000, Options{}, ""},
		{"a named algorithm", 8, 1 << 20, 1000, Options{Algorithm: "ring"}, ""},
		{"a lossy codec", 8, 1 << 20, 1000, Options{Codec: transport.CodecFP16}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, transport.NewMemJobArena(tc.p, tc.bytes), tc.opts)
			for _, c := range j.comms {
				ch, err := c.AllReduceChoice(tc.n, Float32)
				if err != nil {
					t.Fatal(err)
				}
				if (ch.Algorithm == "arena") != (tc.want == "arena") {
					t.Fatalf("rank %d: choice %q", c.Rank(), ch.Algorithm)
				}
			}
		})
	}
}

// TestArenaNotInSubCommunicators: a sub-communicator's ranks are part of the job, so it runs
// its schedules even when the job has an arena, and its calls interleave with the parent's.
func TestArenaNotInSubCommunicators(t *testing.T) {
	for _, p := range []int{2, 5, 8} {
		j := newArenaJob(t, p, 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		j.mustRun(t, "split", func(c *Comm) error {
			sub, err := c.Split(ctx, c.Rank()%2, 0)
			if err != nil {
				return err
			}
			if sub.arena != nil {
				return errors.New("the sub-communicator uses the job's arena")
			}
			for range 3 {
				x := input(Float64, c.Rank(), 33)
				if err := sub.AllReduce(ctx, x, Sum); err != nil {
					return err
				}
				if err := c.AllReduce(ctx, x, Sum); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
	}
}

// TestArenaMismatch: ranks that call different collectives, or the same one with other
// arguments, all get an error naming the call, whether both sides use the arena or one of
// them runs a schedule.
func TestArenaMismatch(t *testing.T) {
	tests := []struct {
		name string
		fn   func(ctx context.Context, c *Comm) error
	}{
		{"different counts", func(ctx context.Context, c *Comm) error {
			return c.AllReduce(ctx, F32(make([]float32, 100+c.Rank())), Sum)
		}},
		{"different counts across the chunk", func(ctx context.Context, c *Comm) error {
			return c.AllReduce(ctx, F32(make([]float32, 5000*(1+c.Rank()%2))), Sum)
		}},
		{"different ops", func(ctx context.Context, c *Comm) error {
			return c.AllReduce(ctx, I32(make([]int32, 10)), ReduceOp(1+c.Rank()%5))
		}},
		{"different dtypes", func(ctx context.Context, c *Comm) error {
			if c.Rank() == 0 {
				return c.AllReduce(ctx, I32(make([]int32, 8)), Sum)
			}
			return c.AllReduce(ctx, F32(make([]float32, 8)), Sum)
		}},
		{"allreduce of nothing vs barrier", func(ctx context.Context, c *Comm) error {
			if c.Rank() == 1 {
				return c.Barrier(ctx)
			}
			return c.AllReduce(ctx, F32(nil), Sum)
		}},
		{"allreduce vs allgather", func(ctx context.Context, c *Comm) error {
			x := make([]float32, 2*c.Size())
			if c.Rank() == 0 {
				return c.AllReduce(ctx, F32(x), Sum)
			}
			return c.AllGather(ctx, F32(x))
		}},
		{"allgather vs allreduce", func(ctx context.Context, c *Comm) error {
			x := make([]float32, 2*c.Size())
			if c.Rank() != 0 {
				return c.AllReduce(ctx, F32(x), Sum)
			}
			return c.AllGather(ctx, F32(x))
		}},
	}
	for _, p := range []int{2, 3, 4, 7, 9} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("p=%d/%s", p, tc.name), func(t *testing.T) {
				t.Parallel()
				j := newArenaJob(t, p, 64<<10)
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				errs := j.run(func(c *Comm) error { return tc.fn(ctx, c) })
				for r, err := range errs {
					var mm *transport.MismatchError
					if !errors.As(err, &mm) && !isAbort(err) {
						t.Fatalf("rank %d: err = %v, want a *transport.MismatchError or its peer's abort", r, err)
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", r)) || !strings.Contains(err.Error(), "#0") {
						t.Errorf("rank %d error lacks rank or sequence context: %v", r, err)
					}
				}
				if err := j.comms[0].AllReduce(ctx, F32(make([]float32, 3)), Sum); err == nil || !strings.Contains(err.Error(), "earlier failure") {
					t.Fatalf("call after a mismatch: err = %v", err)
				}
			})
		}
	}
}

// heldArena holds up a rank in its first wait: it says when the rank is waiting and, once the
// wait is over, keeps the rank from looking at the arena until released, as a rank that the
// scheduler leaves asleep after the others woke it.
type heldArena struct {
	transport.Arena
	waiting, release chan struct{}
	once             atomic.Bool
}

func (a *heldArena) Wait(ctx context.Context, off int, old uint32) error {
	first := a.once.CompareAndSwap(false, true)
	if first {
		close(a.waiting)
	}
	err := a.Arena.Wait(ctx, off, old)
	if first {
		<-a.release
	}
	return err
}

// TestArenaMismatchAfterABarrier: the ranks pass a barrier (Init's) and then call different
// collectives, while one rank, between the two others, still sleeps in the barrier after it
// was released. That rank's barrier succeeds, and its next call fails with the mismatch of
// call #1, as the others' do, each naming both calls of #1: not an error of the barrier (#0),
// nor the late rank's barrier as the other call.
func TestArenaMismatchAfterABarrier(t *testing.T) {
	const p, late = 3, 1
	j := newArenaJob(t, p, (p+4)<<20)
	held := &heldArena{Arena: j.comms[late].arena.a, waiting: make(chan struct{}), release: make(chan struct{})}
	j.comms[late].arena.a = held
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first := func(c *Comm) error {
		if c.Rank() == 0 {
			return c.AllReduce(ctx, F32(make([]float32, 16)), Sum)
		}
		return c.Broadcast(ctx, F32(make([]float32, 16)), 0)
	}
	var barrierErr, lateErr error
	others := make(chan []error)
	go func() {
		<-held.waiting
		errs := make([]error, p)
		j.run(func(c *Comm) error {
			if c.Rank() != late {
				if err := c.Barrier(ctx); err != nil {
					errs[c.Rank()] = fmt.Errorf("barrier: %w", err)
				} else {
					errs[c.Rank()] = first(c)
				}
			}
			return nil
		})
		close(held.release)
		others <- errs
	}()
	if barrierErr = j.comms[late].Barrier(ctx); barrierErr == nil {
		lateErr = first(j.comms[late])
	}
	errs := <-others
	if barrierErr != nil {
		t.Fatalf("rank %d: the barrier failed: %v", late, barrierErr)
	}
	errs[late] = lateErr
	for r, err := range errs {
		var mm *transport.MismatchError
		if !errors.As(err, &mm) && !isAbort(err) {
			t.Errorf("rank %d: err = %v, want the first collective's mismatch or its peer's abort", r, err)
		} else if !strings.Contains(err.Error(), "AllReduce(float, 16, sum)") || !strings.Contains(err.Error(), "Broadcast(float, 16, root 0)") {
			t.Errorf("rank %d: err = %v, want one naming the two calls #1", r, err)
		}
	}
}

// TestArenaRankGone: a rank that closes its endpoint instead of joining a call makes every
// other rank's call fail, naming it, in the one-phase and the chunked form.
func TestArenaRankGone(t *testing.T) {
	for _, p := range []int{2, 3, 8, 9} {
		for _, n := range []int{10, 100_000} {
			t.Run(fmt.Sprintf("p=%d/n=%d", p, n), func(t *testing.T) {
				t.Parallel()
				eps := transport.NewMemJobArena(p, (p+4)<<20)
				j := everyCallThroughArena(t, newJob(t, eps, Options{}))
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				gone := p - 1
				errs := j.run(func(c *Comm) error {
					x := F32(make([]float32, n))
					if err := c.AllReduce(ctx, x, Sum); err != nil {
						return err
					}
					if c.Rank() == gone {
						time.Sleep(10 * time.Millisecond)
						return eps[gone].Close()
					}
					return c.AllReduce(ctx, x, Sum)
				})
				for r, err := range errs[:gone] {
					if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", gone)) {
						t.Errorf("rank %d: err = %v, want one naming rank %d", r, err, gone)
					}
				}
			})
		}
	}
}

// TestArenaDeadline: ranks waiting for one that never comes return at their deadline.
func TestArenaDeadline(t *testing.T) {
	for _, n := range []int{10, 100_000} {
		j := newArenaJob(t, 3, 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		errs := j.run(func(c *Comm) error {
			if c.Rank() == 2 {
				return nil
			}
			return c.AllReduce(ctx, F32(make([]float32, n)), Sum)
		})
		cancel()
		for r, err := range errs[:2] {
			var te *TimeoutError
			if !errors.As(err, &te) && !errors.Is(err, context.DeadlineExceeded) && !isAbort(err) {
				t.Errorf("n=%d rank %d: err = %v, want a *TimeoutError (or a peer's abort)", n, r, err)
			}
		}
	}
}

// BenchmarkArenaAllReduce measures a float32 Sum allreduce through the in-process arena
// against auto's schedules over the in-process transport, at 4 KiB to 16 MiB, 4 to 32 ranks.
// The in-process arena wakes its waiters through a channel, not a futex: the numbers compare
// the algorithms' shapes (copies, phases), not the cost of a wake-up between processes.
//
//	go test -run '^$' -bench ArenaAllReduce ./collective/
func BenchmarkArenaAllReduce(b *testing.B) {
	for _, p := range []int{4, 8, 32} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20} {
			for _, path := range []string{"schedule", "arena"} {
				b.Run(fmt.Sprintf("p=%d/%dKiB/%s", p, size>>10, path), func(b *testing.B) {
					arena := 0
					if path == "arena" {
						arena = int(transport.ArenaBytesFor(p))
					}
					j := newJob(b, transport.NewMemJobArena(p, arena), Options{})
					if arena > 0 {
						everyCallThroughArena(b, j)
					}
					b.SetBytes(int64(size))
					j.benchAllReduce(b, context.Background(), size/4)
				})
			}
		}
	}
}

// TestArenaSeveralComms: Comms over one endpoint take turns with the arena, each numbering its
// calls from 0, as a program's Comm and a library's do.
func TestArenaSeveralComms(t *testing.T) {
	for _, p := range []int{2, 3, 8} {
		eps := transport.NewMemJobArena(p, (p+4)<<20)
		first, second := everyCallThroughArena(t, newJob(t, eps, Options{})), everyCallThroughArena(t, newJob(t, eps, Options{}))
		ring := newJob(t, eps, Options{Algorithm: "ring"})
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		for i, j := range []*job{first, ring, second, first, second, second, first, ring} {
			for _, n := range []int{5, 70_000} {
				bufs := make([]Buffer, p)
				j.mustRun(t, fmt.Sprintf("p=%d call %d n=%d", p, i, n), func(c *Comm) error {
					bufs[c.Rank()] = input(Int64, c.Rank(), n)
					return c.AllReduce(ctx, bufs[c.Rank()], Sum)
				})
				if err := compare(bufs[p-1], rankOrder(Int64, Sum, p, n), 0, n); err != nil {
					t.Fatalf("p=%d call %d n=%d: %v", p, i, n, err)
				}
			}
		}
		cancel()
	}
}

// TestArenaAttribution: an attributed arena call names the rank that arrived late.
func TestArenaAttribution(t *testing.T) {
	for _, p := range []int{2, 3, 5} {
		for _, n := range []int{10, 100_000} {
			j := newArenaJob(t, p, (p+4)<<20)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			late := p - 1
			ready := make(chan struct{}, p)
			j.mustRun(t, "attributed", func(c *Comm) error {
				c.SetAttribution(true)
				startLate(c, late, ready, 300*time.Millisecond)
				return c.AllReduce(ctx, F32(make([]float32, n)), Sum)
			})
			cancel()
			for _, c := range j.comms {
				s, ok := c.LastCall()
				if !ok || s.LateRank != late || s.Culprit != CulpritRank || s.Skew < 200*time.Millisecond {
					t.Fatalf("p=%d n=%d rank %d: %+v, %v; want rank %d late by 300 ms", p, n, c.Rank(), s, ok, late)
				}
			}
		}
	}
}
