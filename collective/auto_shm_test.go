package collective

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// shmPaths is an in-process endpoint that reports every peer as reached over a
// shared-memory pipe, as transport/p2p's endpoint does on one host.
type shmPaths struct {
	transport.Endpoint
	path string
}

func (e shmPaths) DataPaths() []string {
	paths := make([]string, e.Size())
	for r := range paths {
		if r != e.Rank() {
			paths[r] = e.path
		}
	}
	return paths
}

// shmJob is a p-rank in-process job whose ranks in onShm report shared-memory pipes (path).
func shmJob(p int, path string, onShm func(r int) bool) []transport.Endpoint {
	eps := transport.NewMemJob(p)
	for r := range eps {
		if onShm(r) {
			eps[r] = shmPaths{eps[r], path}
		}
	}
	return eps
}

// TestAutoSharedMemoryChoices is auto's choice for allreduces of float32 at p = 2..8 ranks on
// one host over shared memory, against the network model's choice for the same call: they
// differ where recursive doubling's reduction of the whole vector at every step outweighs the
// messages it saves (p = 2 from 1 MiB). Calls of
// 2 MiB and more run in 1 MiB chunks, and the choice is the chunk's (chunk.go).
func TestAutoSharedMemoryChoices(t *testing.T) {
	const (
		rd = "recursive-doubling"
		bf = "butterfly"
		bb = "binary-blocks"
		rg = "ring"
	)
	sizes := []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	cases := []struct {
		p        int
		shm, net []string // by size
	}{
		{2, []string{rd, rd, rd, rd, bf, bf}, []string{rd, rd, rd, rd, rd, rd}},
		{3, []string{rd, rd, rg, rg, rg, rg}, []string{rd, rd, rg, rg, rg, rg}},
		{4, []string{rd, rd, rd, bf, bf, bf}, []string{rd, rd, rd, bf, bf, bf}},
		{5, []string{rd, rd, bb, rg, rg, rg}, []string{rd, rd, bb, rg, rg, rg}},
		{6, []string{rd, rd, bb, bb, bb, bb}, []string{rd, rd, bb, bb, bb, bb}},
		{7, []string{rd, rd, rd, rg, rg, rg}, []string{rd, rd, rd, rg, rg, rg}},
		{8, []string{rd, rd, rd, bf, bf, bf}, []string{rd, rd, rd, bf, bf, bf}},
	}
	for _, tc := range cases {
		for _, model := range []string{"shm", "cma", "mem"} {
			want := tc.shm
			if model == "mem" {
				want = tc.net
			}
			eps := shmJob(tc.p, model, func(int) bool { return model != "mem" })
			for r, ep := range eps {
				c, err := New(ep, Options{})
				if err != nil {
					t.Fatal(err)
				}
				for i, size := range sizes {
					ch, err := c.AllReduceChoice(size/4, Float32)
					if err != nil {
						t.Fatalf("p=%d %s rank %d %d B: %v", tc.p, model, r, size, err)
					}
					if ch.Algorithm != want[i] {
						t.Errorf("p=%d %s rank %d %d B: auto chose %s, want %s (predicted %v)",
							tc.p, model, r, size, ch.Algorithm, want[i], ch.Predicted)
					}
				}
			}
			transport.CloseAll(eps)
		}
	}
}

// TestAutoSharedMemoryAllReduce runs auto's shared-memory choices end to end: exact sums on
// every rank for p = 1..9 and lengths around the sizes where the choice differs from the
// network model's.
func TestAutoSharedMemoryAllReduce(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, n := range []int{0, 1, p - 1, 13, 16<<10 + 3, 64<<10 + 1, 256<<10 + 5, 2<<20/4 + 7} {
			t.Run(fmt.Sprintf("p=%d/n=%d", p, n), func(t *testing.T) {
				j := newJob(t, shmJob(p, "shm", func(int) bool { return true }), Options{})
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				errs := j.run(func(c *Comm) error {
					buf := make([]float32, n)
					for i := range buf {
						buf[i] = float32(c.Rank() + i%7)
					}
					if err := c.AllReduce(ctx, F32(buf), Sum); err != nil {
						return err
					}
					for i, v := range buf {
						if want := float32(p*(p-1)/2 + p*(i%7)); v != want {
							return fmt.Errorf("rank %d element %d = %v, want %v", c.Rank(), i, v, want)
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// TestAutoSharedMemoryDisagreement: a rank that plans on the shared-memory model while its
// peers plan on the network's may choose another algorithm; its calls must fail as different
// collectives on every rank, never mix two schedules.
func TestAutoSharedMemoryDisagreement(t *testing.T) {
	for _, p := range []int{2, 3, 5} {
		for _, n := range []int{1, 256<<10 + 5} {
			t.Run(fmt.Sprintf("p=%d/n=%d", p, n), func(t *testing.T) {
				j := newJob(t, shmJob(p, "shm", func(r int) bool { return r == 0 }), Options{})
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				errs := j.run(func(c *Comm) error {
					return c.AllReduce(ctx, F32(make([]float32, n)), Sum)
				})
				for r, err := range errs {
					var mm *transport.MismatchError
					if err == nil {
						t.Errorf("rank %d: the allreduce succeeded across two cost models", r)
					} else if errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("rank %d: hung until the guard: %v", r, err)
					} else if r == 0 && !errors.As(err, &mm) {
						t.Logf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}
