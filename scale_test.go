package hetsync_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
)

// scaleRanks is the in-process job the scale test forms: large enough that anything quadratic
// in the ranks (a table sent to every rank, a planner that replays every schedule, a connection
// to every peer) shows, small enough for one test on a 2-core machine.
const scaleRanks = 512

// A job of 512 ranks in one process forms and runs every collective with its results checked,
// under the default algorithm (auto: its plan at this size is part of what is tested).
func TestManyRanksInProcess(t *testing.T) {
	err := hetsync.InitLocal(context.Background(), scaleRanks, func(ctx context.Context, c *hetsync.Comm) error {
		return everyCollective(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// everyCollective runs each collective once on c with small buffers and checks the result on
// every rank.
func everyCollective(ctx context.Context, c *hetsync.Comm) error {
	p, r := c.Size(), c.Rank()
	fail := func(what string, i int, got, want any) error {
		return fmt.Errorf("rank %d of %d: %s: element %d = %v, want %v", r, p, what, i, got, want)
	}
	// AllReduce: 3 elements a rank, more than the ranks, so schedules split it.
	if err := sumCheck(ctx, c, 3*p+5); err != nil {
		return err
	}
	// ReduceScatter: rank i's block holds the sum of every rank's block i.
	n := 2 * p
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(r + i)
	}
	if err := c.ReduceScatter(ctx, hetsync.F64(x), hetsync.Sum); err != nil {
		return err
	}
	lo, hi := collective.Partition(n, p, r)
	for i := lo; i < hi; i++ {
		if want := float64(p*(p-1)/2 + p*i); x[i] != want {
			return fail("reduce-scatter", i, x[i], want)
		}
	}
	// AllGather: every rank's block, everywhere.
	g := make([]int32, 2*p)
	g[2*r], g[2*r+1] = int32(r), int32(-r)
	if err := c.AllGather(ctx, hetsync.I32(g)); err != nil {
		return err
	}
	for i, v := range g {
		want := int32(i / 2)
		if i%2 == 1 {
			want = -want
		}
		if v != want {
			return fail("allgather", i, v, want)
		}
	}
	// Broadcast from the last rank and Reduce (max) to it.
	b := []int64{int64(r), int64(r) * 3}
	if err := c.Broadcast(ctx, hetsync.I64(b), p-1); err != nil {
		return err
	}
	if b[0] != int64(p-1) || b[1] != int64(3*(p-1)) {
		return fail("broadcast", 0, b, []int64{int64(p - 1), int64(3 * (p - 1))})
	}
	m := []float32{float32(r), -float32(r)}
	if err := c.Reduce(ctx, hetsync.F32(m), hetsync.Max, p-1); err != nil {
		return err
	}
	if r == p-1 && (m[0] != float32(p-1) || m[1] != 0) {
		return fail("reduce max", 0, m, []float32{float32(p - 1), 0})
	}
	// AllToAll: block j of rank r goes to rank j.
	send, recv := make([]int32, p), make([]int32, p)
	for j := range send {
		send[j] = int32(r*p + j)
	}
	if err := c.AllToAll(ctx, hetsync.I32(send), hetsync.I32(recv)); err != nil {
		return err
	}
	for j, v := range recv {
		if want := int32(j*p + r); v != want {
			return fail("alltoall", j, v, want)
		}
	}
	// Send/Recv around the ring: even ranks send first, so no two neighbours both wait.
	out, in := []float64{float64(r)}, []float64{-1}
	next, prev := (r+1)%p, (r+p-1)%p
	if r%2 == 0 {
		if err := c.Send(ctx, next, hetsync.F64(out)); err != nil {
			return err
		}
		if err := c.Recv(ctx, prev, hetsync.F64(in)); err != nil {
			return err
		}
	} else {
		if err := c.Recv(ctx, prev, hetsync.F64(in)); err != nil {
			return err
		}
		if err := c.Send(ctx, next, hetsync.F64(out)); err != nil {
			return err
		}
	}
	if in[0] != float64(prev) {
		return fail("send/recv", 0, in[0], prev)
	}
	return c.Barrier(ctx)
}

// BenchmarkInProcessJob forms a job of 1,024 ranks (or $HETSYNC_BENCH_RANKS) in one process
// and times, as the slowest rank sees them: formation (InitLocal's start to every rank's
// function running), the first allreduce of 1 MiB a rank (planning included) and the next one
// (the steady state).
//
//	go test -run '^$' -bench InProcessJob -benchtime 1x .
func BenchmarkInProcessJob(b *testing.B) {
	p, n := 1024, 1<<18 // 1 MiB of float32 a rank
	if v, err := strconv.Atoi(os.Getenv("HETSYNC_BENCH_RANKS")); err == nil && v > 0 {
		p = v
	}
	var form, first, steady time.Duration
	for range b.N {
		var mu sync.Mutex
		start := time.Now()
		err := hetsync.InitLocal(context.Background(), p, func(ctx context.Context, c *hetsync.Comm) error {
			f := time.Since(start)
			x := make([]float32, n)
			for i := range x {
				x[i] = 1
			}
			t0 := time.Now()
			if err := c.AllReduce(ctx, hetsync.F32(x), hetsync.Sum); err != nil {
				return err
			}
			t1 := time.Now()
			if err := c.AllReduce(ctx, hetsync.F32(x), hetsync.Sum); err != nil {
				return err
			}
			t2 := time.Now()
			if x[n-1] != float32(p*p) {
				return fmt.Errorf("rank %d: element %d = %v, want %d", c.Rank(), n-1, x[n-1], p*p)
			}
			mu.Lock()
			form, first, steady = max(form, f), max(first, t1.Sub(t0)), max(steady, t2.Sub(t1))
			mu.Unlock()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(form.Seconds(), "form-s")
	b.ReportMetric(first.Seconds(), "first-allreduce-s")
	b.ReportMetric(steady.Seconds(), "steady-allreduce-s")
}
