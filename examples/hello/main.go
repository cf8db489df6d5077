// Command hello is the smallest hetsync program: every rank contributes its rank + 1 to an
// allreduce and prints the sum, 1 + 2 + ... + size. Run it under any launcher:
//
//	hetsync launch -np 4 -- go run ./examples/hello
//	mpirun -np 4 -x HETSYNC_JOB_SECRET=$(openssl rand -hex 32) -x HETSYNC_RENDEZVOUS=127.0.0.1:29400 ./hello
//
// or alone, as a job of one rank.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/hetsync/hetsync"
)

func main() {
	ctx := context.Background()
	comm, err := hetsync.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	x := []float32{float32(comm.Rank() + 1)}
	if err := comm.AllReduce(ctx, hetsync.F32(x), hetsync.Sum); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rank %d of %d (local rank %d): sum %v, %v\n", comm.Rank(), comm.Size(), comm.LocalRank(), x[0], comm.Settings())
}
