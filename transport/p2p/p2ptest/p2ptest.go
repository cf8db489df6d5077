// Package p2ptest starts libp2p jobs inside one test process, for the tests of the packages
// above the transport. It must never be imported by non-test code.
package p2ptest

import (
	"context"
	"github.com/hetsync/hetsync/internal/freeport"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
)

// JoinLoopback joins a job of size ranks on 127.0.0.1, each rank's Config being base with its
// Rank, Size and Rendezvous set and then changed by perRank (when not nil). The endpoints are
// closed when the test ends; a failed join fails the test.
func JoinLoopback(t testing.TB, size int, base p2p.Config, perRank func(r int, c *p2p.Config)) []transport.Endpoint {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if base.JoinTimeout == 0 {
		base.JoinTimeout = 50 * time.Second
	}
	eps := make([]transport.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		c := base
		c.Rank, c.Size, c.Rendezvous = r, size, addr
		if perRank != nil {
			perRank(r, &c)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			eps[r], errs[r] = p2p.Join(context.Background(), c)
		}()
	}
	wg.Wait()
	t.Cleanup(func() { transport.CloseAll(eps) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: join: %v", r, err)
		}
	}
	return eps
}
