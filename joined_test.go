package hetsync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// Init returns only once every rank has joined: a rank whose peers all reach the end of their
// join goes on, and one that waits for a rank that never does fails within the join timeout,
// naming itself and the join timeout, instead of running the program's first collective.
func TestJoinedWaitsForEveryRank(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, absent := range []int{-1, p - 1} {
			if absent == 0 && p == 1 {
				continue // a job of one has nobody to wait for
			}
			t.Run(fmt.Sprintf("p%d-absent%d", p, absent), func(t *testing.T) {
				eps := transport.NewMemJob(p)
				errs := make([]error, p)
				var wg sync.WaitGroup
				for r, ep := range eps {
					if r == absent {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, err := newComm(ep, collective.Options{Algorithm: "ring"}, r, p, resolved{}, Settings{})
						if err == nil {
							err = c.joined(context.Background(), 300*time.Millisecond)
						}
						errs[r] = err
					}()
				}
				wg.Wait()
				for r, err := range errs {
					switch {
					case r == absent:
					case absent < 0 && err != nil:
						t.Errorf("rank %d: %v", r, err)
					case absent >= 0 && err == nil:
						t.Errorf("rank %d went on without rank %d", r, absent)
					case absent >= 0 && !strings.Contains(err.Error(), fmt.Sprintf("rank %d: waiting for every rank to join (HETSYNC_JOIN_TIMEOUT", r)):
						t.Errorf("rank %d: error %q does not name the rank and the join timeout", r, err)
					}
				}
			})
		}
	}
}
