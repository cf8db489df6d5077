package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/hetsync/hetsync"
)

// The two-level sum in one process, where every rank shares one host: one leader, and every
// rank prints the whole job's sum.
func TestRunInProcess(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, alg := range []string{"ring", "auto"} {
			t.Run(fmt.Sprintf("p%d-%s", p, alg), func(t *testing.T) {
				outs := make([]bytes.Buffer, p)
				err := hetsync.InitLocal(context.Background(), p, func(ctx context.Context, c *hetsync.Comm) error {
					return run(ctx, c, &outs[c.Rank()])
				}, hetsync.WithAlgorithm(alg))
				if err != nil {
					t.Fatal(err)
				}
				for r := range outs {
					want := fmt.Sprintf("rank %d of %d (local rank %d of %d): sum %d over %d ranks on 1 hosts\n", r, p, r, p, p*(p+1)/2, p)
					if got := outs[r].String(); got != want {
						t.Errorf("rank %d printed %q, want %q", r, got, want)
					}
				}
			})
		}
	}
}
