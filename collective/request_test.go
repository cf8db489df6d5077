package collective

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestNonBlockingCollectives runs the correctness matrix with every call of a (dtype, length)
// outstanding at once, on the whole job and on its sub-communicators.
func TestNonBlockingCollectives(t *testing.T) {
	eachAlgorithmAndSize(t, func(t *testing.T, alg string, p int) {
		j := newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 256})
		exerciseNonBlocking(t, j, alg)
		exerciseColors(t, j, alg, exerciseNonBlocking)
	})
}

// TestNonBlockingOverlaps checks that a non-blocking call returns before its peers have joined,
// that Test reports it pending meanwhile, and that it completes once they do.
func TestNonBlockingOverlaps(t *testing.T) {
	for _, alg := range Algorithms() {
		j := newMemJob(t, 3, Options{Algorithm: alg})
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		bufs := [][]float64{{1, 2}, {3, 4}, {5, 6}}
		reqs := []*Request{j.comms[0].IAllReduce(ctx, F64(bufs[0]), Sum)}
		// Rank 0's call cannot complete without ranks 1 and 2.
		if done, err := reqs[0].Test(); done || err != nil {
			t.Fatalf("%s: Test before the peers called = %v, %v", alg, done, err)
		}
		short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
		if err := reqs[0].Wait(short); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "allreduce #0") {
			t.Fatalf("%s: Wait with a short context = %v", alg, err)
		}
		stop()
		for r := 1; r < 3; r++ {
			reqs = append(reqs, j.comms[r].IAllReduce(ctx, F64(bufs[r]), Sum))
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		for r, b := range bufs {
			if b[0] != 9 || b[1] != 12 {
				t.Errorf("%s: rank %d got %v, want [9 12]", alg, r, b)
			}
		}
		if done, err := reqs[0].Test(); !done || err != nil {
			t.Errorf("%s: Test after Wait = %v, %v", alg, done, err)
		}
		// A barrier no peer joins, to see its sequence number: it fails at its deadline.
		lone, stopLone := context.WithTimeout(ctx, 10*time.Millisecond)
		if next := j.comms[1].IBarrier(lone); reqs[1].Seq() != 0 || next.Seq() != 1 || next.Wait(ctx) == nil {
			t.Errorf("%s: sequence numbers %d and %d, want 0 and 1 (and the lone barrier to fail)", alg, reqs[1].Seq(), next.Seq())
		}
		stopLone()
		cancel()
	}
}

// TestQueuedCallGivesUp cancels a blocking call that waits behind an outstanding non-blocking
// one: it returns at once, and when the turn reaches it the communicator breaks and the peers
// are told, instead of waiting for it.
func TestQueuedCallGivesUp(t *testing.T) {
	j := newMemJob(t, 2, Options{Algorithm: "ring"})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	first := j.comms[0].IAllReduce(ctx, I32(make([]int32, 5)), Sum)
	impatient, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	err := j.comms[0].Barrier(impatient)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "barrier #1") {
		t.Fatalf("queued barrier: err = %v, want the deadline naming barrier #1", err)
	}
	// Rank 1 makes both calls; the first completes, the second fails on rank 0's abort.
	if err := j.comms[1].AllReduce(ctx, I32(make([]int32, 5)), Sum); err != nil {
		t.Fatalf("rank 1 allreduce: %v", err)
	}
	if err := first.Wait(ctx); err != nil {
		t.Fatalf("rank 0 allreduce: %v", err)
	}
	if err := j.comms[1].Barrier(ctx); !isAbort(err) {
		t.Errorf("rank 1 barrier: err = %v, want rank 0's abort", err)
	}
	if err := j.comms[0].IBarrier(ctx).Wait(ctx); err == nil || !strings.Contains(err.Error(), "earlier failure") {
		t.Errorf("rank 0 after giving up: err = %v", err)
	}
}

func TestNonBlockingArguments(t *testing.T) {
	c := newMemJob(t, 3, Options{Algorithm: "ring"}).comms[0]
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *Request
		want string
	}{
		{"bad op", c.IAllReduce(ctx, F32(make([]float32, 4)), ReduceOp(42)), "invalid reduction"},
		{"root", c.IBroadcast(ctx, F32(make([]float32, 4)), 3), "root 3 out of range"},
		{"alltoall", c.IAllToAll(ctx, F32(make([]float32, 4)), F32(make([]float32, 4))), "not divisible"},
	} {
		done, err := tc.req.Test()
		if !done || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Test = %v, %v, want done with an error containing %q", tc.name, done, err, tc.want)
		}
	}
	var nilReq *Request
	if err := nilReq.Wait(ctx); err == nil {
		t.Error("Wait on a nil Request: no error")
	}
}

// TestNonBlockingSendRecv: every rank issues several ISends to its successor and IRecvs from
// its predecessor, interleaved, of different lengths, then a blocking Send and Recv behind
// them; every message must arrive whole and in order.
func TestNonBlockingSendRecv(t *testing.T) {
	const k = 4
	msg := func(from, i int) Buffer { return input(Float64, from*k+i, 1+6*i) }
	for p := 2; p <= 9; p++ {
		for _, tr := range []string{"mem", "tcp"} {
			if tr == "tcp" && p > 4 {
				continue
			}
			var j *job
			if tr == "mem" {
				j = newMemJob(t, p, Options{Algorithm: "ring"})
			} else {
				j = newJob(t, tcpEndpoints(t, p), Options{Algorithm: "ring"})
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			got := make([][]Buffer, p)
			j.mustRun(t, "send/recv", func(c *Comm) error {
				r := c.Rank()
				next, prev := (r+1)%p, (r+p-1)%p
				got[r] = make([]Buffer, k)
				var reqs []*Request
				for i := 0; i < k-1; i++ {
					got[r][i] = input(Float64, 99, 1+6*i)
					reqs = append(reqs, c.IRecv(ctx, prev, got[r][i]), c.ISend(ctx, next, msg(r, i)))
				}
				got[r][k-1] = input(Float64, 99, 1+6*(k-1))
				if err := c.Send(ctx, next, msg(r, k-1)); err != nil {
					return err
				}
				if err := c.Recv(ctx, prev, got[r][k-1]); err != nil {
					return err
				}
				return WaitAll(ctx, reqs...)
			})
			cancel()
			for r := range got {
				for i, b := range got[r] {
					if err := compare(b, msg((r+p-1)%p, i), 0, b.Len()); err != nil {
						t.Fatalf("%s p=%d rank %d message %d: %v", tr, p, r, i, err)
					}
				}
			}
		}
	}
	c := newMemJob(t, 2, Options{Algorithm: "ring"}).comms[0]
	if done, err := c.ISend(context.Background(), 0, F32(make([]float32, 1))).Test(); !done || err == nil {
		t.Errorf("ISend to itself: Test = %v, %v", done, err)
	}
}
