package hetsync_test

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync"
)

// Four ranks in this process sum their rank + 1.
func ExampleInitLocal() {
	err := hetsync.InitLocal(context.Background(), 4, func(ctx context.Context, c *hetsync.Comm) error {
		x := []float32{float32(c.Rank() + 1)}
		if err := c.AllReduce(ctx, hetsync.F32(x), hetsync.Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("%d ranks, sum %v\n", c.Size(), x[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: 4 ranks, sum 10
}

// Rank 2 of five broadcasts its vector with the ring algorithm.
func ExampleInitLocal_broadcast() {
	err := hetsync.InitLocal(context.Background(), 5, func(ctx context.Context, c *hetsync.Comm) error {
		v := make([]int64, 3)
		if c.Rank() == 2 {
			v = []int64{7, 8, 9}
		}
		if err := c.Broadcast(ctx, hetsync.I64(v), 2); err != nil {
			return err
		}
		if c.Rank() == 4 {
			fmt.Println("rank 4 got", v, "with", c.Settings().Algorithm)
		}
		return nil
	}, hetsync.WithAlgorithm("ring"))
	if err != nil {
		fmt.Println(err)
	}
	// Output: rank 4 got [7 8 9] with ring
}

// A program that no launcher started is a job of one rank. Under `hetsync launch -np 4`,
// mpirun, srun, torchrun or a Kubernetes indexed Job the same code joins the other ranks.
func ExampleInit() {
	ctx := context.Background()
	comm, err := hetsync.Init(ctx, hetsync.WithEnv(func(string) string { return "" }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer comm.Close()
	x := []float64{1.5}
	if err := comm.AllReduce(ctx, hetsync.F64(x), hetsync.Sum); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank %d of %d: %v (%v)\n", comm.Rank(), comm.Size(), x[0], comm.Settings())
	// Output: rank 0 of 1: 1.5 (transport=mem algorithm=auto)
}

// The communicator's non-blocking calls and sub-communicators are collective.Comm's: an
// allreduce overlaps other work, and even and odd ranks split into two groups.
func ExampleComm_Split() {
	err := hetsync.InitLocal(context.Background(), 6, func(ctx context.Context, c *hetsync.Comm) error {
		x := []int32{1}
		req := c.IAllReduce(ctx, hetsync.I32(x), hetsync.Sum)
		if err := req.Wait(ctx); err != nil {
			return err
		}
		half, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer half.Close()
		y := []int32{int32(c.Rank())}
		if err := half.AllReduce(ctx, hetsync.I32(y), hetsync.Sum); err != nil {
			return err
		}
		if c.Rank() < 2 {
			// Print in rank order: rank 1 waits until rank 0 has printed.
			if c.Rank() == 1 {
				if err := c.Recv(ctx, 0, hetsync.I32(make([]int32, 1))); err != nil {
					return err
				}
			}
			fmt.Printf("rank %d: all %d, group of %d: %d\n", c.Rank(), x[0], half.Size(), y[0])
			if c.Rank() == 0 {
				return c.Send(ctx, 1, hetsync.I32(make([]int32, 1)))
			}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// rank 0: all 6, group of 3: 6
	// rank 1: all 6, group of 3: 9
}
