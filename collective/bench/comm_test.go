package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// TestRunOverCollectiveComm is the end-to-end test: every registered algorithm of package
// collective, every op, several rank counts, over the in-process transport, through a Runner
// with a separate gather communicator as hetsync bench uses it. Every checked element must be
// right.
func TestRunOverCollectiveComm(t *testing.T) {
	ops := []Op{AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll}
	for _, algo := range collective.Algorithms() {
		for _, op := range ops {
			for _, p := range []int{1, 2, 3, 4, 5, 8} {
				t.Run(fmt.Sprintf("%s/%v/p=%d", algo, op, p), func(t *testing.T) {
					cfg := Config{Op: op, MinBytes: 4, MaxBytes: 64 << 10, Factor: 16, Warmup: 1, Iters: 2, Check: 1, Root: p / 2}
					eps := transport.NewMemJob(p)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					rows := make([][]Row, p)
					errs := make([]error, p)
					var wg sync.WaitGroup
					for r := range eps {
						wg.Add(1)
						go func() {
							defer wg.Done()
							defer func() {
								if errs[r] != nil {
									cancel()
								}
							}()
							comm, err := collective.New(eps[r], collective.Options{Algorithm: algo})
							if err != nil {
								errs[r] = err
								return
							}
							gather, err := collective.New(eps[r], collective.Options{Algorithm: "ring"})
							if err != nil {
								errs[r] = err
								return
							}
							rows[r], errs[r] = (&Runner{Comm: comm, Gather: gather, Config: cfg}).Run(ctx)
						}()
					}
					wg.Wait()
					for r, err := range errs {
						if err != nil {
							t.Fatalf("rank %d: %v", r, err)
						}
					}
					if len(rows[0]) == 0 {
						t.Fatal("no rows")
					}
					for _, row := range rows[0] {
						if row.Wrong != 0 || row.Algo != algo {
							t.Errorf("size %d: %d wrong elements, algo %q", row.Bytes, row.Wrong, row.Algo)
						}
					}
				})
			}
		}
	}
}
