package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// splitSpec is what every rank of a p-rank job passes to Split in the tests: colors 0..k-1
// dealt round-robin (k = 2 or 3 where p allows), rank p-1 left out (Undefined) from p = 5 on,
// and keys that shuffle the ranks (a fixed permutation, with ties that parent rank breaks).
func splitSpec(p, r int) (color, key int) {
	k := min(p, 2+p%2)
	if p >= 5 && r == p-1 {
		return Undefined, 0
	}
	return r % k, (r * 5 % 7) / 2
}

// wantMembers is the parent ranks of each color in their new order: by key, then parent rank.
func wantMembers(p int) map[int][]int {
	out := map[int][]int{}
	for r := 0; r < p; r++ {
		if color, _ := splitSpec(p, r); color != Undefined {
			out[color] = append(out[color], r)
		}
	}
	for _, ms := range out {
		slices.SortStableFunc(ms, func(a, b int) int {
			_, ka := splitSpec(p, a)
			_, kb := splitSpec(p, b)
			return ka - kb
		})
	}
	return out
}

// splitJob splits every communicator of j with f(rank) and returns the sub-communicators by
// color, each ordered by its new rank, checking membership against want.
func splitJob(t *testing.T, j *job, f func(r int) (color, key int), want map[int][]int) map[int]*job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	subs := make([]*Comm, len(j.comms))
	j.mustRun(t, "split", func(c *Comm) error {
		color, key := f(c.Rank())
		s, err := c.Split(ctx, color, key)
		subs[c.Rank()] = s
		if (s == nil) != (color < 0) {
			return fmt.Errorf("color %d: got communicator %v", color, s)
		}
		return err
	})
	out := map[int]*job{}
	for color, members := range want {
		sj := &job{comms: make([]*Comm, len(members))}
		for i, r := range members {
			s := subs[r]
			if s == nil || s.Rank() != i || s.Size() != len(members) {
				t.Fatalf("color %d: parent rank %d got %v, want rank %d of %d", color, r, s, i, len(members))
			}
			sj.comms[i] = s
		}
		out[color] = sj
	}
	return out
}

// TestSplitCollectives runs the whole correctness matrix on the sub-communicators of every
// algorithm and rank count, all colors at once.
func TestSplitCollectives(t *testing.T) {
	eachAlgorithmAndSize(t, func(t *testing.T, alg string, p int) {
		exerciseColors(t, newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 256}), alg, exercise)
	})
}

// exerciseColors splits the p ranks of j by splitSpec and runs ex on every color at once.
func exerciseColors(t *testing.T, j *job, alg string, ex func(t *testing.T, j *job, alg string)) {
	p := len(j.comms)
	for color, sj := range splitJob(t, j, func(r int) (int, int) { return splitSpec(p, r) }, wantMembers(p)) {
		t.Run(fmt.Sprintf("color=%d", color), func(t *testing.T) {
			t.Parallel()
			ex(t, sj, alg)
		})
	}
}

func TestSplitTCP(t *testing.T) {
	for _, alg := range Algorithms() {
		const p = 5
		j := newJob(t, tcpEndpoints(t, p), Options{Algorithm: alg, SegmentBytes: 1024})
		subs := splitJob(t, j, func(r int) (int, int) { return splitSpec(p, r) }, wantMembers(p))
		var wg sync.WaitGroup
		for color, sj := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run(fmt.Sprintf("%s/color=%d", alg, color), func(t *testing.T) { exercise(t, sj, alg) })
			}()
		}
		wg.Wait()
	}
}

// TestSplitNested splits a sub-communicator again and checks that the grandchildren map to the
// right job ranks and work.
func TestSplitNested(t *testing.T) {
	const p = 9
	j := newMemJob(t, p, Options{Algorithm: "ring"})
	// Halves by rank parity, reversed by key; then thirds of each half.
	halves := splitJob(t, j, func(r int) (int, int) { return r % 2, -r },
		map[int][]int{0: {8, 6, 4, 2, 0}, 1: {7, 5, 3, 1}})
	even := splitJob(t, halves[0], func(r int) (int, int) { return r % 3, r },
		map[int][]int{0: {0, 3}, 1: {1, 4}, 2: {2}})
	// Sub-rank 1 of color 1 of the even half is its rank 4: job rank 0.
	if got := even[1].comms[1].jobRank(0); got != 6 {
		t.Errorf("job rank of even[1] rank 0 = %d, want 6", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	for _, sj := range even {
		bufs := make([][]int64, len(sj.comms))
		sj.mustRun(t, "allreduce", func(c *Comm) error {
			bufs[c.Rank()] = []int64{int64(c.jobRank(c.Rank())), 1}
			return c.AllReduce(ctx, I64(bufs[c.Rank()]), Sum)
		})
		want := int64(0)
		for r := range sj.comms {
			want += int64(sj.comms[r].jobRank(r))
		}
		for r, b := range bufs {
			if b[0] != want || b[1] != int64(len(sj.comms)) {
				t.Errorf("rank %d: got %v, want [%d %d]", r, b, want, len(sj.comms))
			}
		}
	}
	exercise(t, halves[1], "ring")
}

// TestSplitNeverMixesMessages runs, on every rank at once, allreduces on two sub-communicators
// from two splits (each rank is in one of each) and on the parent, from three goroutines. All
// use the same algorithm and shapes, so a message that reached the wrong communicator would pass
// the header check and show up only in the values: each communicator sums values of its own.
func TestSplitNeverMixesMessages(t *testing.T) {
	for _, alg := range Algorithms() {
		for _, p := range []int{2, 3, 4, 6, 7, 9} {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				t.Parallel()
				j := newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 64})
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				subs := make([][3]*Comm, p) // parent, parity, half
				j.mustRun(t, "splits", func(c *Comm) error {
					a, err := c.Split(ctx, c.Rank()%2, c.Rank())
					if err != nil {
						return err
					}
					b, err := c.Split(ctx, c.Rank()*2/p, -c.Rank())
					subs[c.Rank()] = [3]*Comm{c, a, b}
					return err
				})
				mixAll(ctx, t, j, func(r int) []*Comm { return subs[r][:] }, 30, 37)
			})
		}
	}
}

// mixAll runs mixRounds on every communicator of every rank of j at once, one goroutine each.
func mixAll(ctx context.Context, t *testing.T, j *job, comms func(rank int) []*Comm, rounds, n int) {
	t.Helper()
	j.mustRun(t, "concurrent allreduces", func(c *Comm) error {
		mine := comms(c.Rank())
		var wg sync.WaitGroup
		errs := make([]error, len(mine))
		for k, comm := range mine {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = mixRounds(ctx, comm, k, rounds, n)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// mixRounds allreduces, rounds times, values that identify communicator k and the round: every
// rank of the communicator contributes 1000·k + round + its job rank.
func mixRounds(ctx context.Context, c *Comm, k, rounds, n int) error {
	buf := make([]int64, n)
	want := int64(0)
	for r := 0; r < c.Size(); r++ {
		want += int64(c.jobRank(r))
	}
	for round := 0; round < rounds; round++ {
		v := int64(1000*k + round)
		for i := range buf {
			buf[i] = v + int64(c.jobRank(c.Rank()))
		}
		if err := c.AllReduce(ctx, I64(buf), Sum); err != nil {
			return err
		}
		w := want + v*int64(c.Size())
		for i, x := range buf {
			if x != w {
				return fmt.Errorf("communicator %d (%s) round %d: element %d = %d, want %d", k, c.who, round, i, x, w)
			}
		}
	}
	return nil
}

// TestConcurrentSplits splits the job and, on every rank at once, splits the job again and the
// sub-communicator from two goroutines, so that the channel agreement of the two calls races on
// each rank (and, in some of the repetitions, forces a second round of it); then runs the four
// communicators of every rank at once.
func TestConcurrentSplits(t *testing.T) {
	for _, p := range []int{2, 5, 8, 2, 5, 8, 2, 5, 8} {
		j := newMemJob(t, p, Options{Algorithm: "butterfly", SegmentBytes: 64})
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		comms := make([][4]*Comm, p)
		j.mustRun(t, "splits", func(c *Comm) error {
			half, err := c.Split(ctx, c.Rank()*2/p, c.Rank())
			if err != nil {
				return err
			}
			var again, quarter *Comm
			var errAgain, errQuarter error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				again, errAgain = c.Split(ctx, c.Rank()%2, -c.Rank())
			}()
			go func() {
				defer wg.Done()
				quarter, errQuarter = half.Split(ctx, half.Rank()%2, 0)
			}()
			wg.Wait()
			comms[c.Rank()] = [4]*Comm{c, half, again, quarter}
			return errors.Join(errAgain, errQuarter)
		})
		mixAll(ctx, t, j, func(r int) []*Comm { return comms[r][:] }, 20, 29)
		cancel()
	}
}

func TestSplitArguments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	// Every rank Undefined: everyone gets nil, and the parent still works.
	j := newMemJob(t, 4, Options{Algorithm: "butterfly"})
	j.mustRun(t, "all undefined", func(c *Comm) error {
		s, err := c.Split(ctx, Undefined-3, 0)
		if s != nil {
			return fmt.Errorf("got a communicator for a negative color")
		}
		if err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	// ps with more servers than a color has ranks keeps as many as it can.
	j = newMemJob(t, 5, Options{Algorithm: "ps", Servers: 4})
	subs := splitJob(t, j, func(r int) (int, int) { return r / 3, 0 }, map[int][]int{0: {0, 1, 2}, 1: {3, 4}})
	for color, sj := range subs {
		if got := sj.comms[0].opts.Servers; got != len(sj.comms) {
			t.Errorf("color %d: %d servers, want %d", color, got, len(sj.comms))
		}
		exercise(t, sj, "ps")
	}
	// A lossy codec on the parent does not disturb the split's integer exchange.
	j = newMemJob(t, 3, Options{Algorithm: "ring", Codec: transport.CodecBF16})
	subs = splitJob(t, j, func(r int) (int, int) { return 0, 1 << 20 * (3 - r) }, map[int][]int{0: {2, 1, 0}})
	bufs := make([][]float32, 3)
	subs[0].mustRun(t, "bf16 allreduce", func(c *Comm) error {
		bufs[c.Rank()] = []float32{1, 2}
		return c.AllReduce(ctx, F32(bufs[c.Rank()]), Sum)
	})
	if bufs[0][0] != 3 || bufs[0][1] != 6 {
		t.Errorf("bf16 sub-communicator allreduce = %v, want [3 6]", bufs[0])
	}
}

// TestSplitWithLinks: a sub-communicator of a communicator with a link matrix plans from its
// members' part of it, so the host-aware configurations work on it too.
func TestSplitWithLinks(t *testing.T) {
	host := []int{0, 0, 0, 1, 2, 2, 3, 3, 3}
	m := rackMatrix(host, []int{0, 0, 1, 1}, nil)
	// Ranks 4, 1 and 7, in that order, run on hosts 2, 0 and 3: numbered 1, 0 and 2 among them.
	sub := m.Sub([]int{4, 1, 7})
	if err := sub.Validate(); err != nil {
		t.Fatalf("sub-matrix: %v", err)
	}
	if fmt.Sprint(sub.Host) != "[1 0 2]" || sub.Links[0][1] != m.Links[4][1] || sub.Links[2][0] != m.Links[7][4] {
		t.Fatalf("sub-matrix hosts %v, links %v", sub.Host, sub.Links)
	}
	for _, name := range []string{"auto", "ring", "hier-ring/grouped", "hier-butterfly/interleaved", "ps"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := newMemJob(t, len(host), Options{Algorithm: name, SegmentBytes: 256, Links: m})
			exerciseColors(t, j, name, exercise)
		})
	}
}

// TestSplitChannelAgreement drives the allocator as two Splits racing on one rank would: the
// second to commit a channel at or below one this rank already took must refuse it.
func TestSplitChannelAgreement(t *testing.T) {
	a := newChannelAllocator()
	first := a.proposal()
	if first != int(chanSubComm) {
		t.Fatalf("first proposal %d, want %d", first, chanSubComm)
	}
	tests := []struct {
		take int
		ok   bool
	}{{first + 2, true}, {first + 2, false}, {first, false}, {first + 3, false}, {first + 4, true}, {first + 9, true}, {first + 5, false}}
	for _, tc := range tests {
		if got := a.take(tc.take); got != tc.ok {
			t.Errorf("take(%d) = %v, want %v", tc.take, got, tc.ok)
		}
	}
	// A communicator takes two channels: its collectives' and its point-to-point messages'.
	if got := a.proposal(); got != first+11 {
		t.Errorf("proposal after taking %d = %d, want %d", first+9, got, first+11)
	}
}
