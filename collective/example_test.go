package collective_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// Six ranks split into two rows of three (color = rank / 3), each row ordered by descending job
// rank (key = -rank). Each row sums its job ranks while the whole job runs a barrier, and a
// non-blocking allreduce of the row overlaps the rank's own work.
func ExampleComm_Split() {
	const p = 6
	eps := transport.NewMemJob(p)
	defer transport.CloseAll(eps)
	ctx := context.Background()
	out := make([]string, p)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			world, err := collective.New(ep, collective.Options{Algorithm: "ring"})
			if err != nil {
				out[r] = err.Error()
				return
			}
			row, err := world.Split(ctx, r/3, -r)
			if err != nil {
				out[r] = err.Error()
				return
			}
			sum := []int64{int64(r)}
			req := row.IAllReduce(ctx, collective.I64(sum), collective.Sum)
			// Work that needs neither sum nor the network goes here.
			if err := world.Barrier(ctx); err != nil {
				out[r] = err.Error()
				return
			}
			if err := req.Wait(ctx); err != nil {
				out[r] = err.Error()
				return
			}
			out[r] = fmt.Sprintf("job rank %d: row %d, rank %d of %d, row sum %d", r, r/3, row.Rank(), row.Size(), sum[0])
		}()
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// job rank 0: row 0, rank 2 of 3, row sum 3
	// job rank 1: row 0, rank 1 of 3, row sum 3
	// job rank 2: row 0, rank 0 of 3, row sum 3
	// job rank 3: row 1, rank 2 of 3, row sum 12
	// job rank 4: row 1, rank 1 of 3, row sum 12
	// job rank 5: row 1, rank 0 of 3, row sum 12
}
