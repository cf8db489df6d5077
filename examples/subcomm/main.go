// Command subcomm reduces in two levels, the way a job spread over several hosts saves the
// slow links between them: the ranks of each host reduce to their host's leader, the leaders
// allreduce across the hosts, and each leader broadcasts the result back inside its host. Every
// rank contributes its rank + 1 and prints the sum, 1 + 2 + ... + size, with the number of
// ranks and hosts that took part:
//
//	hetsync launch -np 4 -- go run ./examples/subcomm
//	hetsync launch -np 8 -H node1:4,node2:4 -- ./subcomm
//
// or alone, as a job of one rank.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/hetsync/hetsync"
)

func main() {
	ctx := context.Background()
	comm, err := hetsync.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	if err := run(ctx, comm, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run is the two-level sum on comm; it prints one line to out.
func run(ctx context.Context, comm *hetsync.Comm, out io.Writer) error {
	host, err := comm.SplitByHost(ctx)
	if err != nil {
		return err
	}
	defer host.Close()
	leader := host.Rank() == 0
	// The sum, the number of ranks and the number of hosts: each rank counts itself once and
	// each host's leader counts its host once.
	x := []float64{float64(comm.Rank() + 1), 1, 0}
	if leader {
		x[2] = 1
	}
	if err := host.Reduce(ctx, hetsync.F64(x), hetsync.Sum, 0); err != nil {
		return err
	}
	// Only the leaders form the communicator across hosts; the other ranks pass a negative
	// color and get nil, but take part in the call as every rank of comm must.
	color := -1
	if leader {
		color = 0
	}
	leaders, err := comm.Split(ctx, color, comm.Rank())
	if err != nil {
		return err
	}
	if leaders != nil {
		defer leaders.Close()
		if err := leaders.AllReduce(ctx, hetsync.F64(x), hetsync.Sum); err != nil {
			return err
		}
	}
	if err := host.Broadcast(ctx, hetsync.F64(x), 0); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "rank %d of %d (local rank %d of %d): sum %v over %v ranks on %v hosts\n",
		comm.Rank(), comm.Size(), host.LocalRank(), host.LocalSize(), x[0], x[1], x[2])
	return err
}
