package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// hangGuard bounds every test job so that a bug shows up as a failure naming the case rather
// than as a stuck test binary. It is not a timing assertion.
const hangGuard = 60 * time.Second

// job is p communicators over one transport.
type job struct {
	comms []*Comm
}

func newMemJob(t testing.TB, p int, opts Options) *job {
	t.Helper()
	return newJob(t, transport.NewMemJob(p), opts)
}

func newJob(t testing.TB, eps []transport.Endpoint, opts Options) *job {
	t.Helper()
	j := &job{}
	for _, ep := range eps {
		c, err := New(ep, opts)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		j.comms = append(j.comms, c)
	}
	t.Cleanup(func() { transport.CloseAll(eps) })
	return j
}

// tcpEndpoints builds a p-rank job of stream endpoints over TCP loopback, one connection per
// pair of ranks.
func tcpEndpoints(t testing.TB, p int) []transport.Endpoint {
	t.Helper()
	conns := make([][]net.Conn, p)
	for i := range conns {
		conns[i] = make([]net.Conn, p)
	}
	for i := 0; i < p; i++ {
		for j := i + 1; j < p; j++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					accepted <- nil
					return
				}
				accepted <- c
			}()
			d, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			a := <-accepted
			ln.Close()
			if a == nil {
				t.Fatalf("accept failed")
			}
			conns[i][j], conns[j][i] = d, a
		}
	}
	eps := make([]transport.Endpoint, p)
	for r := 0; r < p; r++ {
		rw := make([]io.ReadWriteCloser, p)
		for q := range rw {
			if q != r {
				rw[q] = conns[r][q]
			}
		}
		ep, err := transport.NewStreamEndpoint(r, p, rw, transport.DefaultStreamOptions())
		if err != nil {
			t.Fatalf("NewStreamEndpoint: %v", err)
		}
		eps[r] = ep
	}
	return eps
}

// run calls fn on every rank at once and returns the errors by rank.
func (j *job) run(fn func(c *Comm) error) []error {
	errs := make([]error, len(j.comms))
	var wg sync.WaitGroup
	for r, c := range j.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

func (j *job) mustRun(t testing.TB, what string, fn func(c *Comm) error) {
	t.Helper()
	for r, err := range j.run(fn) {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// input is rank r's deterministic test data: small integers (so that Prod does not overflow
// int32 at p = 9) plus, for floats, a fraction so that sums round.
func input(dt DType, r, n int) Buffer {
	v := func(i int) (float64, int64) {
		k := int64((r*7+i*3)%11) - 5
		if k == 0 {
			k = 1
		}
		return 1 + float64((r*13+i*7)%17)/16 + float64(k)*1e-3, k
	}
	switch dt {
	case Float32:
		x := make([]float32, n)
		for i := range x {
			f, _ := v(i)
			x[i] = float32(f)
		}
		return F32(x)
	case Float64:
		x := make([]float64, n)
		for i := range x {
			x[i], _ = v(i)
		}
		return F64(x)
	case Int32:
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(v2(v(i)))
		}
		return I32(x)
	default:
		x := make([]int64, n)
		for i := range x {
			x[i] = v2(v(i))
		}
		return I64(x)
	}
}

func v2(_ float64, k int64) int64 { return k }

// elem reads element i as float64 (ints exactly).
func elem(b Buffer, i int) float64 {
	switch b.DType {
	case Float32:
		return float64(view[float32](b.Bytes)[i])
	case Float64:
		return view[float64](b.Bytes)[i]
	case Int32:
		return float64(view[int32](b.Bytes)[i])
	default:
		return float64(view[int64](b.Bytes)[i])
	}
}

// reference reduces the inputs of all p ranks element by element in rank order with its own
// arithmetic (float64 for floats; int64 truncated to the type for integers, which wraps exactly
// as the collectives' arithmetic does).
func reference(dt DType, op ReduceOp, p, n int) Buffer {
	out := input(dt, 0, n)
	ins := make([]Buffer, p)
	for r := range ins {
		ins[r] = input(dt, r, n)
	}
	for i := 0; i < n; i++ {
		acc := elem(ins[0], i)
		iacc := int64(acc)
		for r := 1; r < p; r++ {
			x := elem(ins[r], i)
			switch op {
			case Sum, Avg:
				acc += x
				iacc += int64(x)
			case Prod:
				acc *= x
				iacc *= int64(x)
			case Min:
				acc = math.Min(acc, x)
				iacc = int64(acc)
			case Max:
				acc = math.Max(acc, x)
				iacc = int64(acc)
			}
		}
		switch dt {
		case Float32:
			if op == Avg {
				acc /= float64(p)
			}
			view[float32](out.Bytes)[i] = float32(acc)
		case Float64:
			if op == Avg {
				acc /= float64(p)
			}
			view[float64](out.Bytes)[i] = acc
		case Int32:
			v := int32(iacc)
			if op == Avg {
				v /= int32(p)
			}
			view[int32](out.Bytes)[i] = v
		case Int64:
			if op == Avg {
				iacc /= int64(p)
			}
			view[int64](out.Bytes)[i] = iacc
		}
	}
	return out
}

// tolerance is the relative error allowed between a collective's float result and the
// rank-order reference: reductions run in another order, and float32 sums of p ≤ 16 terms
// near 1 stay within a few ulps.
func tolerance(dt DType) float64 {
	if dt == Float32 {
		return 1e-5
	}
	return 1e-12
}

func compare(got, want Buffer, lo, hi int) error {
	tol := tolerance(got.DType)
	for i := lo; i < hi; i++ {
		g, w := elem(got, i), elem(want, i)
		if got.DType == Int32 || got.DType == Int64 {
			if g != w {
				return fmt.Errorf("element %d = %v, want %v exactly", i, g, w)
			}
			continue
		}
		if math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("element %d = %v, want %v (tolerance %g)", i, g, w, tol)
		}
	}
	return nil
}

var allDTypes = []DType{Float32, Float64, Int32, Int64}

func lengths(p int) []int {
	ls := []int{0, 1, p - 1, p + 1, 1009}
	if p == 1 {
		ls = []int{0, 1, 2, 1009}
	}
	return ls
}

// collCase is one call of the correctness matrix: what every rank calls, blocking or not, and
// how the results are checked once all ranks have returned. Each case owns its buffers, so the
// cases of one (dtype, length) can all be in flight at once.
type collCase struct {
	name string
	// call makes rank c's call: the blocking form when nb is false (its error comes back as a
	// completed Request), the non-blocking one when it is true.
	call  func(ctx context.Context, c *Comm, nb bool) *Request
	check func() error
}

// either runs the blocking form of a call or starts the non-blocking one.
func either(nb bool, blocking func() error, nonBlocking func() *Request) *Request {
	if nb {
		return nonBlocking()
	}
	r := &Request{done: make(chan struct{}), err: blocking()}
	close(r.done)
	return r
}

// matrixCases is every collective on p ranks with dtype dt and n elements.
func matrixCases(p int, dt DType, n int) []collCase {
	var cases []collCase
	// own is rank c's input, kept in bufs for the check.
	own := func(bufs []Buffer, c *Comm) Buffer {
		bufs[c.Rank()] = input(dt, c.Rank(), n)
		return bufs[c.Rank()]
	}
	// AllReduce, every op; every rank must also hold bit-identical results.
	for _, op := range []ReduceOp{Sum, Avg, Min, Max, Prod} {
		bufs := make([]Buffer, p)
		cases = append(cases, collCase{"allreduce " + op.String(), func(ctx context.Context, c *Comm, nb bool) *Request {
			b := own(bufs, c)
			return either(nb, func() error { return c.AllReduce(ctx, b, op) }, func() *Request { return c.IAllReduce(ctx, b, op) })
		}, func() error {
			want := reference(dt, op, p, n)
			for r := range bufs {
				if err := compare(bufs[r], want, 0, n); err != nil {
					return fmt.Errorf("rank %d: %v", r, err)
				}
				if string(bufs[r].Bytes) != string(bufs[0].Bytes) {
					return fmt.Errorf("rank %d differs from rank 0", r)
				}
			}
			return nil
		}})
	}
	for _, op := range []ReduceOp{Sum, Avg, Min} {
		bufs := make([]Buffer, p)
		cases = append(cases, collCase{"reduce-scatter " + op.String(), func(ctx context.Context, c *Comm, nb bool) *Request {
			b := own(bufs, c)
			return either(nb, func() error { return c.ReduceScatter(ctx, b, op) }, func() *Request { return c.IReduceScatter(ctx, b, op) })
		}, func() error {
			want := reference(dt, op, p, n)
			for r := range bufs {
				lo, hi := Partition(n, p, r)
				if err := compare(bufs[r], want, lo, hi); err != nil {
					return fmt.Errorf("rank %d: %v", r, err)
				}
			}
			return nil
		}})
	}
	// AllGather: rank r contributes its block of its own input.
	gathered := make([]Buffer, p)
	cases = append(cases, collCase{"allgather", func(ctx context.Context, c *Comm, nb bool) *Request {
		r := c.Rank()
		b := input(dt, r, n)
		gathered[r] = b
		lo, hi := Partition(n, p, r)
		for i := range b.Bytes {
			if i < lo*dt.Size() || i >= hi*dt.Size() {
				b.Bytes[i] = 0xEE
			}
		}
		return either(nb, func() error { return c.AllGather(ctx, b) }, func() *Request { return c.IAllGather(ctx, b) })
	}, func() error {
		for r := range gathered {
			for q := 0; q < p; q++ {
				lo, hi := Partition(n, p, q)
				if err := compare(gathered[r], input(dt, q, n), lo, hi); err != nil {
					return fmt.Errorf("rank %d block %d: %v", r, q, err)
				}
			}
		}
		return nil
	}})
	// Broadcast and Reduce from two roots.
	for _, root := range []int{0, p - 1} {
		bcast, reduced := make([]Buffer, p), make([]Buffer, p)
		cases = append(cases, collCase{fmt.Sprintf("broadcast root %d", root), func(ctx context.Context, c *Comm, nb bool) *Request {
			b := own(bcast, c)
			return either(nb, func() error { return c.Broadcast(ctx, b, root) }, func() *Request { return c.IBroadcast(ctx, b, root) })
		}, func() error {
			for r := range bcast {
				if err := compare(bcast[r], input(dt, root, n), 0, n); err != nil {
					return fmt.Errorf("rank %d: %v", r, err)
				}
			}
			return nil
		}}, collCase{fmt.Sprintf("reduce root %d", root), func(ctx context.Context, c *Comm, nb bool) *Request {
			b := own(reduced, c)
			return either(nb, func() error { return c.Reduce(ctx, b, Max, root) }, func() *Request { return c.IReduce(ctx, b, Max, root) })
		}, func() error {
			return compare(reduced[root], reference(dt, Max, p, n), 0, n)
		}})
	}
	// AllToAll with n rounded to a multiple of p.
	m := n / p * p
	recv := make([]Buffer, p)
	cases = append(cases, collCase{"alltoall", func(ctx context.Context, c *Comm, nb bool) *Request {
		r := c.Rank()
		send, b := input(dt, r, m), input(dt, 99, m)
		recv[r] = b
		return either(nb, func() error { return c.AllToAll(ctx, send, b) }, func() *Request { return c.IAllToAll(ctx, send, b) })
	}, func() error {
		blk := m / p
		for r := range recv {
			for q := 0; q < p; q++ {
				// Block q of rank r's recv is block r of rank q's send.
				got := recv[r].Slice(q*blk, (q+1)*blk)
				want := input(dt, q, m).Slice(r*blk, (r+1)*blk)
				if err := compare(got, want, 0, blk); err != nil {
					return fmt.Errorf("rank %d block %d: %v", r, q, err)
				}
			}
		}
		return nil
	}})
	cases = append(cases, collCase{"barrier", func(ctx context.Context, c *Comm, nb bool) *Request {
		return either(nb, func() error { return c.Barrier(ctx) }, func() *Request { return c.IBarrier(ctx) })
	}, func() error { return nil }})
	return cases
}

// exercise runs every collective with every dtype and several lengths on one job, one call at a
// time, and checks the results against the reference.
func exercise(t *testing.T, j *job, algName string) {
	p := len(j.comms)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for _, dt := range allDTypes {
		for _, n := range lengths(p) {
			for _, cc := range matrixCases(p, dt, n) {
				name := fmt.Sprintf("%s p=%d %v n=%d %s", algName, p, dt, n, cc.name)
				j.mustRun(t, name, func(c *Comm) error { return cc.call(ctx, c, false).Wait(ctx) })
				if err := cc.check(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	// Send/Recv around a ring.
	if p > 1 {
		bufs := make([]Buffer, p)
		j.mustRun(t, algName+" send/recv", func(c *Comm) error {
			r := c.Rank()
			bufs[r] = input(Float64, 99, 5)
			errc := make(chan error, 1)
			go func() { errc <- c.Send(ctx, mod(r+1, p), input(Float64, r, 5)) }()
			if err := c.Recv(ctx, mod(r-1, p), bufs[r]); err != nil {
				return err
			}
			return <-errc
		})
		for r := range bufs {
			if err := compare(bufs[r], input(Float64, mod(r-1, p), 5), 0, 5); err != nil {
				t.Fatalf("%s send/recv rank %d: %v", algName, r, err)
			}
		}
	}
}

// exerciseNonBlocking issues every case of a (dtype, length) at once on every rank, every
// third one blocking (so that it waits its turn behind the outstanding ones), then waits for
// all and checks them.
func exerciseNonBlocking(t *testing.T, j *job, algName string) {
	p := len(j.comms)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for _, dt := range allDTypes {
		for _, n := range lengths(p) {
			cases := matrixCases(p, dt, n)
			name := fmt.Sprintf("%s p=%d %v n=%d", algName, p, dt, n)
			j.mustRun(t, name, func(c *Comm) error {
				reqs := make([]*Request, len(cases))
				for i, cc := range cases {
					reqs[i] = cc.call(ctx, c, i%3 != 2)
				}
				return WaitAll(ctx, reqs...)
			})
			for _, cc := range cases {
				if err := cc.check(); err != nil {
					t.Fatalf("%s %s: %v", name, cc.name, err)
				}
			}
		}
	}
}

// eachAlgorithmAndSize runs fn as a parallel subtest for every algorithm and p = 1..9.
func eachAlgorithmAndSize(t *testing.T, fn func(t *testing.T, alg string, p int)) {
	for _, alg := range Algorithms() {
		for p := 1; p <= 9; p++ {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				t.Parallel()
				fn(t, alg, p)
			})
		}
	}
}

func TestCollectivesMem(t *testing.T) {
	eachAlgorithmAndSize(t, func(t *testing.T, alg string, p int) {
		exercise(t, newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 256}), alg)
	})
	t.Run("ps-2-servers/p=5", func(t *testing.T) {
		exercise(t, newMemJob(t, 5, Options{Algorithm: "ps", Servers: 2}), "ps")
	})
}

// TestCollectivesLarge runs multi-MiB allreduces with the default segment size.
func TestCollectivesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-MiB buffers; run without -short")
	}
	const n = 3<<20/4 + 7 // a little over 3 MiB of float32
	want := reference(Float32, Sum, 7, n)
	want4 := reference(Int64, Sum, 4, n/2)
	for _, alg := range Algorithms() {
		for _, p := range []int{4, 7} {
			j := newMemJob(t, p, Options{Algorithm: alg})
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			bufs := make([]Buffer, p)
			j.mustRun(t, alg, func(c *Comm) error {
				if p == 4 {
					bufs[c.Rank()] = input(Int64, c.Rank(), n/2)
				} else {
					bufs[c.Rank()] = input(Float32, c.Rank(), n)
				}
				return c.AllReduce(ctx, bufs[c.Rank()], Sum)
			})
			cancel()
			for r := range bufs {
				w, m := want, n
				if p == 4 {
					w, m = want4, n/2
				}
				if err := compare(bufs[r], w, 0, m); err != nil {
					t.Fatalf("%s p=%d rank %d: %v", alg, p, r, err)
				}
			}
		}
	}
}

// TestLargeSharedCollectives covers the chain broadcast and the segmented tree reduce, which
// only run above 256 KiB.
func TestLargeSharedCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-MiB buffers; run without -short")
	}
	const p, n, root = 7, 3<<20/8 + 5, 3
	j := newMemJob(t, p, Options{Algorithm: "ring", SegmentBytes: 64 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	bufs := make([]Buffer, p)
	j.mustRun(t, "broadcast", func(c *Comm) error {
		bufs[c.Rank()] = input(Float64, c.Rank(), n)
		return c.Broadcast(ctx, bufs[c.Rank()], root)
	})
	for r := range bufs {
		if err := compare(bufs[r], input(Float64, root, n), 0, n); err != nil {
			t.Fatalf("broadcast rank %d: %v", r, err)
		}
	}
	j.mustRun(t, "reduce", func(c *Comm) error {
		bufs[c.Rank()] = input(Int64, c.Rank(), n)
		return c.Reduce(ctx, bufs[c.Rank()], Sum, root)
	})
	if err := compare(bufs[root], reference(Int64, Sum, p, n), 0, n); err != nil {
		t.Fatalf("reduce: %v", err)
	}
}

func TestCollectivesTCP(t *testing.T) {
	for _, alg := range Algorithms() {
		for _, p := range []int{1, 2, 3, 4, 5} {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				exercise(t, newJob(t, tcpEndpoints(t, p), Options{Algorithm: alg, SegmentBytes: 1024}), alg)
			})
		}
	}
}

func TestMismatchIsAnErrorOnBothSides(t *testing.T) {
	tests := []struct {
		name string
		fn   func(ctx context.Context, c *Comm) error
	}{
		{"allreduce vs broadcast", func(ctx context.Context, c *Comm) error {
			x := make([]float32, 100)
			if c.Rank() == 0 {
				return c.AllReduce(ctx, F32(x), Sum)
			}
			return c.Broadcast(ctx, F32(x), 0)
		}},
		{"different counts", func(ctx context.Context, c *Comm) error {
			x := make([]float32, 100+c.Rank())
			return c.AllReduce(ctx, F32(x), Sum)
		}},
		{"zero versus some elements", func(ctx context.Context, c *Comm) error {
			x := make([]float32, 10*c.Rank())
			return c.ReduceScatter(ctx, F32(x), Sum)
		}},
		{"different ops", func(ctx context.Context, c *Comm) error {
			x := make([]int32, 10)
			return c.AllReduce(ctx, I32(x), ReduceOp(1+c.Rank()))
		}},
		{"different dtypes", func(ctx context.Context, c *Comm) error {
			if c.Rank() == 0 {
				return c.AllGather(ctx, I32(make([]int32, 8)))
			}
			return c.AllGather(ctx, F32(make([]float32, 8)))
		}},
	}
	for _, alg := range Algorithms() {
		for _, tc := range tests {
			for _, tr := range []string{"mem", "tcp"} {
				var eps []transport.Endpoint
				if tr == "mem" {
					eps = transport.NewMemJob(2)
				} else {
					eps = tcpEndpoints(t, 2)
				}
				j := newJob(t, eps, Options{Algorithm: alg})
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				errs := j.run(func(c *Comm) error { return tc.fn(ctx, c) })
				cancel()
				for r, err := range errs {
					var mm *transport.MismatchError
					if !errors.As(err, &mm) && !isAbort(err) {
						t.Fatalf("%s %s %s: rank %d: err = %v, want a *transport.MismatchError or its peer's abort", alg, tc.name, tr, r, err)
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", r)) || !strings.Contains(err.Error(), "#0") {
						t.Errorf("%s %s: rank %d error lacks rank or sequence context: %v", alg, tc.name, r, err)
					}
				}
				// The communicator stays failed: the next call says so at once.
				err := j.comms[0].Barrier(context.Background())
				if err == nil || !strings.Contains(err.Error(), "earlier failure") {
					t.Fatalf("%s %s: call after a mismatch: err = %v", alg, tc.name, err)
				}
			}
		}
	}
}

func TestContextDeadline(t *testing.T) {
	for _, alg := range Algorithms() {
		j := newMemJob(t, 3, Options{Algorithm: alg})
		// Rank 2 never joins; ranks 0 and 1 must return with the deadline error.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = j.comms[r].AllReduce(ctx, F32(make([]float32, 1000)), Sum)
			}()
		}
		wg.Wait()
		cancel()
		for r, err := range errs {
			if !errors.Is(err, context.DeadlineExceeded) && !isAbort(err) {
				t.Errorf("%s rank %d: err = %v, want the deadline (or a peer's abort)", alg, r, err)
			}
		}
		// An already cancelled context fails before any message is sent.
		c := newMemJob(t, 2, Options{Algorithm: alg}).comms[0]
		done, stop := context.WithCancel(context.Background())
		stop()
		if err := c.Barrier(done); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: barrier with a cancelled context: err = %v", alg, err)
		}
	}
}

func isAbort(err error) bool {
	var pa *PeerAbortedError
	return errors.As(err, &pa)
}

func TestArgumentValidation(t *testing.T) {
	c := newMemJob(t, 3, Options{Algorithm: "ring"}).comms[0]
	ctx := context.Background()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"bad dtype", c.AllReduce(ctx, Buffer{DType: 9, Bytes: make([]byte, 8)}, Sum), "invalid dtype"},
		{"ragged bytes", c.AllReduce(ctx, Buffer{DType: Float32, Bytes: make([]byte, 7)}, Sum), "whole number"},
		{"bad op", c.AllReduce(ctx, F32(make([]float32, 4)), ReduceOp(42)), "invalid reduction"},
		{"root too big", c.Broadcast(ctx, F32(make([]float32, 4)), 3), "root 3 out of range"},
		{"negative root", c.Reduce(ctx, F32(make([]float32, 4)), Sum, -1), "root -1 out of range"},
		{"alltoall divisibility", c.AllToAll(ctx, F32(make([]float32, 4)), F32(make([]float32, 4))), "not divisible"},
		{"alltoall mismatch", c.AllToAll(ctx, F32(make([]float32, 6)), I32(make([]int32, 6))), "differ"},
		{"send to self", c.Send(ctx, 0, F32(make([]float32, 4))), "or this rank itself"},
		{"recv from nowhere", c.Recv(ctx, 7, F32(make([]float32, 4))), "out of range"},
	}
	for _, tc := range tests {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) || !strings.Contains(tc.err.Error(), "rank 0") {
			t.Errorf("%s: err = %v, want one containing %q and the rank", tc.name, tc.err, tc.want)
		}
	}
	eps := transport.NewMemJob(2)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Algorithm: "bogus"}, "known: auto, binary-blocks, butterfly, ps, ring"},
		{Options{Algorithm: "ps", Servers: 3}, "Servers 3 out of range"},
		{Options{Algorithm: "ring", Servers: 1}, "only meaningful"},
		{Options{SegmentBytes: -1}, "negative"},
		{Options{Codec: 77}, "unknown codec"},
	} {
		if _, err := New(eps[0], tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): err = %v, want one containing %q", tc.opts, err, tc.want)
		}
	}
	if got := strings.Join(Algorithms(), ","); got != "auto,binary-blocks,butterfly,ps,ring" {
		t.Errorf("Algorithms() = %s", got)
	}
}
