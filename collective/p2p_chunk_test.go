package collective_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestChunkedAllReduceOverTCP runs allreduces that are chunked over plain TCP (chunk.go) on
// real loopback connections: lengths of two chunks and more that no chunk divides, every
// algorithm, exact sums on every rank.
func TestChunkedAllReduceOverTCP(t *testing.T) {
	const n = 2<<20/4 + 7 // float32: three chunks
	for _, p := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("p=", p), func(t *testing.T) {
			eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: fmt.Sprint("chunks over tcp ", p), Security: p2p.SecurityNone,
				DataPath: p2p.DataPathTCP, Logger: slog.New(slog.DiscardHandler)}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, alg := range []string{"auto", "ring", "binary-blocks"} {
				err := eachRank(p, func(r int) error {
					c, err := collective.New(eps[r], collective.Options{Algorithm: alg})
					if err != nil {
						return err
					}
					b := make([]float32, n)
					for i := range b {
						b[i] = float32(r*1000 + i%1000)
					}
					if err := c.AllReduce(ctx, collective.F32(b), collective.Sum); err != nil {
						return err
					}
					for i, v := range b {
						want := float32(0)
						for q := range p {
							want += float32(q*1000 + i%1000)
						}
						if v != want {
							return fmt.Errorf("rank %d element %d = %v, want %v", r, i, v, want)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", alg, err)
				}
			}
		})
	}
}

// eachRank runs fn for ranks 0..p-1 at once and joins their errors.
func eachRank(p int, fn func(r int) error) error {
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
	return errors.Join(errs...)
}
