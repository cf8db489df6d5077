package hetsync_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hetsync/hetsync"
)

// checkSub checks that sub is the communicator of the ranks of c whose color equals color
// (colors[r] is rank r's), ranked by rank, with the given local rank and size, c's settings,
// and working collectives.
func checkSub(ctx context.Context, c, sub *hetsync.Comm, colors []int, wantLocal, wantLocalSize int) error {
	var members []int
	for r, col := range colors {
		if col == colors[c.Rank()] {
			members = append(members, r)
		}
	}
	if sub.Size() != len(members) || members[sub.Rank()] != c.Rank() {
		return fmt.Errorf("rank %d: sub-communicator rank %d of %d, want rank %d in %v",
			c.Rank(), sub.Rank(), sub.Size(), c.Rank(), members)
	}
	if sub.LocalRank() != wantLocal || sub.LocalSize() != wantLocalSize {
		return fmt.Errorf("rank %d (color %d): local rank %d of %d, want %d of %d",
			c.Rank(), colors[c.Rank()], sub.LocalRank(), sub.LocalSize(), wantLocal, wantLocalSize)
	}
	if sub.Settings() != c.Settings() {
		return fmt.Errorf("rank %d: sub-communicator settings %v, want %v", c.Rank(), sub.Settings(), c.Settings())
	}
	x := []int64{int64(c.Rank())}
	if err := sub.AllReduce(ctx, hetsync.I64(x), hetsync.Sum); err != nil {
		return err
	}
	want := 0
	for _, r := range members {
		want += r
	}
	if x[0] != int64(want) {
		return fmt.Errorf("rank %d: sum over %v = %d, want %d", c.Rank(), members, x[0], want)
	}
	return nil
}

// placeAmong is r's index among the ranks q < n for which same(q) holds, and their number.
func placeAmong(n, r int, same func(q int) bool) (index, count int) {
	for q := range n {
		if same(q) {
			if q < r {
				index++
			}
			count++
		}
	}
	return index, count
}

// Split returns a hetsync.Comm whose ranks, local ranks and settings are the sub-communicator's;
// closing it leaves the job's Comm working.
func TestSplit(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, groups := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("p%d-groups%d", p, groups), func(t *testing.T) {
				colors := make([]int, p)
				for r := range colors {
					colors[r] = r % groups
				}
				err := hetsync.InitLocal(context.Background(), p, func(ctx context.Context, c *hetsync.Comm) error {
					sub, err := c.Split(ctx, colors[c.Rank()], c.Rank())
					if err != nil {
						return err
					}
					// An InitLocal job shares one host: the local rank is the sub-communicator rank.
					if err := checkSub(ctx, c, sub, colors, sub.Rank(), sub.Size()); err != nil {
						return err
					}
					if err := sub.Close(); err != nil {
						return fmt.Errorf("rank %d: closing the sub-communicator: %w", c.Rank(), err)
					}
					if err := sub.Close(); err != nil {
						return fmt.Errorf("rank %d: closing the sub-communicator twice: %w", c.Rank(), err)
					}
					host, err := c.SplitByHost(ctx)
					if err != nil {
						return err
					}
					defer host.Close()
					if err := checkSub(ctx, c, host, make([]int, p), c.Rank(), p); err != nil {
						return err
					}
					return sumCheck(ctx, c, 5)
				}, hetsync.WithAlgorithm("ring"))
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// A rank that passes a negative color gets no communicator.
func TestSplitUndefined(t *testing.T) {
	err := hetsync.InitLocal(context.Background(), 4, func(ctx context.Context, c *hetsync.Comm) error {
		color := -1
		if c.Rank()%2 == 1 {
			color = 0
		}
		sub, err := c.Split(ctx, color, -c.Rank())
		if err != nil {
			return err
		}
		if color < 0 {
			if sub != nil {
				return fmt.Errorf("rank %d: color -1 gave a communicator of %d", c.Rank(), sub.Size())
			}
			return nil
		}
		defer sub.Close()
		// Keys -1 and -3: rank 3 comes first.
		if want := map[int]int{1: 1, 3: 0}[c.Rank()]; sub.Size() != 2 || sub.Rank() != want {
			return fmt.Errorf("rank %d: rank %d of %d in the odd ranks, want %d of 2", c.Rank(), sub.Rank(), sub.Size(), want)
		}
		return sumCheck(ctx, sub, 3)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ranks of a p2p job on two hosts (parted by HETSYNC_HOSTNAME): a sub-communicator's local
// rank and size count its members on each host, and SplitByHost groups the ranks by host.
func TestSplitAcrossHosts(t *testing.T) {
	hosts := []string{"a", "a", "b", "b", "b", "a", "b"}
	p := len(hosts)
	port := freePort(t)
	env := func(r int) map[string]string {
		m := launchers[0].env(r, p, port)
		local, size := placeAmong(p, r, func(q int) bool { return hosts[q] == hosts[r] })
		m["HETSYNC_LOCAL_RANK"], m["HETSYNC_LOCAL_SIZE"] = strconv.Itoa(local), strconv.Itoa(size)
		m["HETSYNC_HOSTNAME"], m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"] = hosts[r], "none", "tcp"
		return m
	}
	// local is r's place among the ranks with its color on its host.
	local := func(colors []int, r int) (int, int) {
		return placeAmong(p, r, func(q int) bool { return colors[q] == colors[r] && hosts[q] == hosts[r] })
	}
	initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
		r := c.Rank()
		parity := make([]int, p)
		for q := range parity {
			parity[q] = q % 2
		}
		sub, err := c.Split(ctx, parity[r], r)
		if err != nil {
			return err
		}
		defer sub.Close()
		wl, ws := local(parity, r)
		if err := checkSub(ctx, c, sub, parity, wl, ws); err != nil {
			return err
		}
		host, err := c.SplitByHost(ctx)
		if err != nil {
			return err
		}
		defer host.Close()
		byHost := make([]int, p)
		for q, h := range hosts {
			byHost[q] = int(h[0])
		}
		if err := checkSub(ctx, c, host, byHost, c.LocalRank(), c.LocalSize()); err != nil {
			return err
		}
		return sumCheck(ctx, c, 3)
	})
}

// TestUseAfterClose: a sub-communicator and the job's Comm (on the arena path: three ranks of
// one host over shared memory) fail every call after their Close with an error that wraps
// hetsync.ErrClosed and says the Comm is closed, rather than working on (a sub-communicator)
// or speaking of the arena and closed connections (the job's Comm); closing a
// sub-communicator leaves the job's Comm working.
func TestUseAfterClose(t *testing.T) {
	const p = 3
	initJob(t, p, shmEnv(t, p), func(ctx context.Context, c *hetsync.Comm) error {
		r := c.Rank()
		closed := func(what string, err error) error {
			if !errors.Is(err, hetsync.ErrClosed) || !strings.Contains(err.Error(), "Comm is closed") ||
				strings.Contains(err.Error(), "arena") || strings.Contains(err.Error(), "network connection") {
				return fmt.Errorf("rank %d: %s after Close: %v, want an error wrapping hetsync.ErrClosed", r, what, err)
			}
			return nil
		}
		sub, err := c.Split(ctx, r%2, r)
		if err != nil {
			return err
		}
		if err := sumCheck(ctx, sub, 5); err != nil {
			return err
		}
		if err := sub.Close(); err != nil {
			return err
		}
		if err := closed("a sub-communicator's allreduce", sub.AllReduce(ctx, hetsync.F64(make([]float64, 5)), hetsync.Sum)); err != nil {
			return err
		}
		if err := sumCheck(ctx, c, 5); err != nil {
			return fmt.Errorf("the job's Comm after a sub-communicator's Close: %w", err)
		}
		if err := c.Close(); err != nil {
			return err
		}
		x := hetsync.F64(make([]float64, 5))
		_, splitErr := c.Split(ctx, 0, r)
		for _, call := range []struct {
			what string
			err  error
		}{
			{"allreduce", c.AllReduce(ctx, x, hetsync.Sum)},
			{"barrier", c.Barrier(ctx)},
			{"send", c.Send(ctx, (r+1)%p, x)},
			{"recv", c.Recv(ctx, (r+1)%p, x)},
			{"split", splitErr},
		} {
			if err := closed("the job's "+call.what, call.err); err != nil {
				return err
			}
		}
		return nil
	})
}
