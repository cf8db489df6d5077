package extend

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// reduceBroadcast is an algorithm defined outside the collective package: every rank sends
// its buffer to rank 0, which reduces them all and sends the result back. It moves 2(p-1)
// full buffers through rank 0's links and no byte between two other ranks, so it is the
// fastest allreduce where rank 0 is a hub and the other links are slow.
type reduceBroadcast struct{}

func (reduceBroadcast) AllReduce(b *collective.Builder) {
	if b.Rank() != 0 {
		b.Send(0, 0, b.Len())
		b.Recv(0, 0, b.Len())
		return
	}
	for r := 1; r < b.Ranks(); r++ {
		b.RecvReduce(r, 0, b.Len())
	}
	for r := 1; r < b.Ranks(); r++ {
		b.Send(r, 0, b.Len())
	}
}

func (reduceBroadcast) ReduceScatter(b *collective.Builder) {
	if b.Rank() != 0 {
		lo, hi := b.Block(b.Rank())
		b.Send(0, 0, b.Len())
		b.Recv(0, lo, hi)
		return
	}
	for r := 1; r < b.Ranks(); r++ {
		b.RecvReduce(r, 0, b.Len())
	}
	for r := 1; r < b.Ranks(); r++ {
		lo, hi := b.Block(r)
		b.Send(r, lo, hi)
	}
}

func (reduceBroadcast) AllGather(b *collective.Builder) {
	if b.Rank() != 0 {
		lo, hi := b.Block(b.Rank())
		b.Send(0, lo, hi)
		b.Recv(0, 0, b.Len())
		return
	}
	for r := 1; r < b.Ranks(); r++ {
		lo, hi := b.Block(r)
		b.Recv(r, lo, hi)
	}
	for r := 1; r < b.Ranks(); r++ {
		b.Send(r, 0, b.Len())
	}
}

const algName = "reduce-broadcast"

// registry is the built-in algorithms and reduceBroadcast.
func registry(t *testing.T) *collective.Registry {
	t.Helper()
	reg := collective.Builtin()
	if err := reg.Register(algName, reduceBroadcast{}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// star is a network of p ranks, each on its own host, where rank 0's links carry 10 GB/s
// and every other link 10 MB/s.
func star(p int) *topology.Matrix {
	m := topology.Uniform(p, 30e-6, 1/1e7)
	for r := 1; r < p; r++ {
		m.Links[0][r] = topology.Link{Alpha: 30e-6, Beta: 1 / 1e10}
		m.Links[r][0] = m.Links[0][r]
	}
	return m
}

// lengths are the buffer lengths each job runs: empty, one element, p-1, primes and the
// length auto is asked about.
func lengths(p int) []int { return []int{0, 1, p - 1, 7, 1009, 40009, choiceLength} }

// choiceLength is the length (1 MiB of float32) at which the tests ask auto what it runs:
// large enough for bandwidth to decide.
const choiceLength = 1 << 18

// input is rank r's buffer of n small integers, whose sums float32 holds exactly.
func input(r, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((r+1)*(i%97) + r)
	}
	return x
}

// sum is what the allreduce of p ranks' inputs of n elements leaves.
func sum(p, n int) []float32 {
	want := make([]float32, n)
	for r := range p {
		for i, v := range input(r, n) {
			want[i] += v
		}
	}
	return want
}

// onRanks runs fn on a Comm over every endpoint, each on its own goroutine, with a bounded
// context and the allreduce's result for every length, and fails the test with every rank's
// error.
func onRanks(t *testing.T, eps []transport.Endpoint, opts collective.Options, fn func(ctx context.Context, c *collective.Comm, wants map[int][]float32) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wants := make(map[int][]float32)
	for _, n := range lengths(len(eps)) {
		wants[n] = sum(len(eps), n)
	}
	errs := eachRank(len(eps), func(r int) error {
		c, err := collective.New(eps[r], opts)
		if err != nil {
			return err
		}
		return fn(ctx, c, wants)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// eachRank runs fn for ranks 0 to p-1, each on its own goroutine, and returns their errors.
func eachRank(p int, fn func(r int) error) []error {
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errs
}

// allReduceExact runs an allreduce of every length on the job and checks every rank's result;
// with wantChoice it first checks that the communicator runs that algorithm for the largest
// length.
func allReduceExact(t *testing.T, eps []transport.Endpoint, opts collective.Options, wantChoice string) {
	t.Helper()
	p := len(eps)
	onRanks(t, eps, opts, func(ctx context.Context, c *collective.Comm, wants map[int][]float32) error {
		if wantChoice != "" {
			ch, err := c.AllReduceChoice(choiceLength, collective.Float32)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(ch.Algorithm, wantChoice) {
				return fmt.Errorf("auto runs %s for %d elements on the star, want %s", ch.Algorithm, choiceLength, wantChoice)
			}
		}
		for _, n := range lengths(p) {
			x := input(c.Rank(), n)
			if err := c.AllReduce(ctx, collective.F32(x), collective.Sum); err != nil {
				return err
			}
			for i, v := range wants[n] {
				if x[i] != v {
					return fmt.Errorf("%s allreduce of %d elements: element %d is %v, want %v", opts.Algorithm, n, i, x[i], v)
				}
			}
		}
		return nil
	})
}

// TestAlgorithmFromOutside registers reduceBroadcast from this package and runs it on 1 to 9
// ranks over the in-memory transport: by name (allreduce, reduce-scatter and allgather), and
// through auto on a star network, where auto must pick it from 4 ranks on (on 3, recursive
// doubling and butterfly also use rank 0's links alone, and send fewer messages).
func TestAlgorithmFromOutside(t *testing.T) {
	for p := 1; p <= 9; p++ {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			reg := registry(t)
			byName := collective.Options{Algorithm: algName, Registry: reg}
			allReduceExact(t, memJob(t, p), byName, "")
			reduceScatterAllGatherExact(t, memJob(t, p), byName)
			want := ""
			if p >= 4 {
				want = algName
			}
			allReduceExact(t, memJob(t, p), collective.Options{Algorithm: "auto", Registry: reg, Links: star(p)}, want)
		})
	}
}

func memJob(t *testing.T, p int) []transport.Endpoint {
	eps := transport.NewMemJob(p)
	t.Cleanup(func() { transport.CloseAll(eps) })
	return eps
}

// reduceScatterAllGatherExact runs a reduce-scatter and then an allgather of its result,
// which leaves every rank with the allreduce, for every length.
func reduceScatterAllGatherExact(t *testing.T, eps []transport.Endpoint, opts collective.Options) {
	t.Helper()
	p := len(eps)
	onRanks(t, eps, opts, func(ctx context.Context, c *collective.Comm, wants map[int][]float32) error {
		for _, n := range lengths(p) {
			x := input(c.Rank(), n)
			if err := c.ReduceScatter(ctx, collective.F32(x), collective.Sum); err != nil {
				return err
			}
			lo, hi := collective.Partition(n, p, c.Rank())
			for i, v := range wants[n][lo:hi] {
				if x[lo+i] != v {
					return fmt.Errorf("reduce-scatter of %d elements: element %d is %v, want %v", n, lo+i, x[lo+i], v)
				}
			}
			if err := c.AllGather(ctx, collective.F32(x)); err != nil {
				return err
			}
			for i, v := range wants[n] {
				if x[i] != v {
					return fmt.Errorf("allgather of %d elements: element %d is %v, want %v", n, i, x[i], v)
				}
			}
		}
		return nil
	})
}

// TestAlgorithmFromOutsideP2P runs reduceBroadcast by name and through auto over real libp2p
// hosts on loopback: 3 ranks, and 4, where auto picks it on the star. The jobs have no arena,
// which auto would take ahead of any schedule on one host.
func TestAlgorithmFromOutsideP2P(t *testing.T) {
	for _, p := range []int{3, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "an algorithm from outside", Security: p2p.SecurityNone,
				ArenaBytes: -1, Logger: slog.New(slog.DiscardHandler)}, nil)
			reg := registry(t)
			allReduceExact(t, eps, collective.Options{Algorithm: algName, Registry: reg}, "")
			want := ""
			if p >= 4 {
				want = algName
			}
			allReduceExact(t, eps, collective.Options{Algorithm: "auto", Registry: reg, Links: star(p)}, want)
		})
	}
}

// TestAlgorithmFromOutsideInit hands the registry to hetsync's own Init options
// (WithAlgorithms) and names the algorithm with WithAlgorithm, as a user's program would.
func TestAlgorithmFromOutsideInit(t *testing.T) {
	const p, n = 5, 1009
	want := sum(p, n)
	err := hetsync.InitLocal(context.Background(), p, func(ctx context.Context, c *hetsync.Comm) error {
		if c.Algorithm() != algName {
			return fmt.Errorf("rank %d runs %q, want %q", c.Rank(), c.Algorithm(), algName)
		}
		x := input(c.Rank(), n)
		if err := c.AllReduce(ctx, collective.F32(x), collective.Sum); err != nil {
			return err
		}
		for i, v := range want {
			if x[i] != v {
				return fmt.Errorf("rank %d: element %d is %v, want %v", c.Rank(), i, x[i], v)
			}
		}
		return nil
	}, hetsync.WithAlgorithms(registry(t)), hetsync.WithAlgorithm(algName), hetsync.WithEnv(func(string) string { return "" }))
	if err != nil {
		t.Fatal(err)
	}
}

// TestArenaComesFromTheRegistry: auto runs the calls its rules give the host's arena there
// only when its registry holds the arena, as Builtin's does; a registry of the program's own
// algorithms alone runs them on the same ranks, exactly.
func TestArenaComesFromTheRegistry(t *testing.T) {
	const p = 4
	own := collective.NewRegistry()
	if err := own.Register(algName, reduceBroadcast{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		reg  *collective.Registry
		want string
	}{
		{"builtin", collective.Builtin(), "arena"},
		{"own", own, algName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps := transport.NewMemJobArena(p, 16<<20)
			t.Cleanup(func() { transport.CloseAll(eps) })
			allReduceExact(t, eps, collective.Options{Algorithm: "auto", Registry: tc.reg}, tc.want)
		})
	}
}

// TestRegistriesDifferAcrossRanks: ranks whose auto chooses among different algorithms fail
// their first call as different collectives. Here rank 0's recursive doubling and rank 1's
// reduceBroadcast match message for message, and would leave rank 1 with rank 0's input.
func TestRegistriesDifferAcrossRanks(t *testing.T) {
	own := collective.NewRegistry()
	if err := own.Register(algName, reduceBroadcast{}); err != nil {
		t.Fatal(err)
	}
	eps := memJob(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	regs := []*collective.Registry{collective.Builtin(), own}
	errs := eachRank(2, func(r int) error {
		c, err := collective.New(eps[r], collective.Options{Registry: regs[r]})
		if err != nil {
			return err
		}
		return c.AllReduce(ctx, collective.F32(input(r, 5)), collective.Sum)
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: an allreduce with another rank's registry succeeded", r)
		}
	}
}

// TestRegisterRefusesBrokenAlgorithm: an algorithm whose schedules leave a rank waiting, or
// step outside the call, is refused when it is registered, with the reason.
func TestRegisterRefusesBrokenAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		alg  collective.Algorithm
		want string
	}{
		{unanswered{}, "never received"},
		{outOfRange{}, "outside the call"},
	} {
		err := collective.Builtin().Register("broken", tc.alg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"broken"`) {
			t.Errorf("Register(%T) = %v, want an error naming the algorithm and saying %q", tc.alg, err, tc.want)
		}
	}
	reg := registry(t)
	if err := reg.Register(algName, reduceBroadcast{}); err == nil {
		t.Error("registering a name twice succeeded")
	}
	if err := reg.Register("auto", reduceBroadcast{}); err == nil {
		t.Error("registering auto succeeded")
	}
	if got := strings.Join(reg.Names(), ","); got != "auto,binary-blocks,butterfly,ps,reduce-broadcast,ring" {
		t.Errorf("Names() = %s", got)
	}
}

// TestStepOutsideTheCallFails: an algorithm that passes Register's checks but asks for a
// step outside the call on a larger job fails that job's calls with an error naming the step,
// on every rank, instead of panicking or hanging.
func TestStepOutsideTheCallFails(t *testing.T) {
	reg := collective.Builtin()
	if err := reg.Register("wrong-above-9", wrongAbove{9}); err != nil {
		t.Fatal(err)
	}
	const p = 10
	eps := memJob(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := eachRank(p, func(r int) error {
		c, err := collective.New(eps[r], collective.Options{Algorithm: "wrong-above-9", Registry: reg})
		if err != nil {
			return err
		}
		return c.AllReduce(ctx, collective.F32(input(r, 7)), collective.Sum)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "outside the call") {
			t.Errorf("rank %d: %v, want an error saying the step is outside the call", r, err)
		}
	}
}

// wrongAbove is reduceBroadcast on jobs of up to ranks ranks, and on larger ones sends one
// element past the end of the buffer.
type wrongAbove struct{ ranks int }

func (w wrongAbove) AllReduce(b *collective.Builder) {
	if b.Ranks() > w.ranks {
		b.Send((b.Rank()+1)%b.Ranks(), 0, b.Len()+1)
		return
	}
	reduceBroadcast{}.AllReduce(b)
}
func (w wrongAbove) ReduceScatter(b *collective.Builder) { reduceBroadcast{}.ReduceScatter(b) }
func (w wrongAbove) AllGather(b *collective.Builder)     { reduceBroadcast{}.AllGather(b) }

// unanswered sends to rank 0, which never receives.
type unanswered struct{}

func (unanswered) AllReduce(b *collective.Builder) {
	if b.Rank() != 0 {
		b.Send(0, 0, b.Len())
	}
}
func (a unanswered) ReduceScatter(b *collective.Builder) { a.AllReduce(b) }
func (a unanswered) AllGather(b *collective.Builder)     { a.AllReduce(b) }

// outOfRange sends past the end of the buffer.
type outOfRange struct{}

func (outOfRange) AllReduce(b *collective.Builder)       { b.Send((b.Rank()+1)%b.Ranks(), 0, b.Len()+1) }
func (a outOfRange) ReduceScatter(b *collective.Builder) { a.AllReduce(b) }
func (a outOfRange) AllGather(b *collective.Builder)     { a.AllReduce(b) }
