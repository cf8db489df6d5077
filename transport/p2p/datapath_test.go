package p2p

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport/shm"
)

// TestShmRingSizeFollowsLocalRanks: the rings of a same-host pair are sized from the number
// of ranks on that host and the host's budget, both ends of every pipe agree, and a job over
// the smaller rings still computes the right sums.
func TestShmRingSizeFollowsLocalRanks(t *testing.T) {
	cases := []struct {
		name      string
		size      int
		dataPath  string
		budget    int64
		perRank   func(r int, c *Config)
		want      [2]int // ring size of the pairs on the host of the even ranks, of the odd ranks
		allReduce bool
	}{
		{"np4/default", 4, DataPathShm, 0, nil, [2]int{shm.DefaultRingSize, shm.DefaultRingSize}, false},
		// 9 ranks: 72 rings, 18 MiB at 256 KiB.
		{"np9/20MiB", 9, DataPathShm, 20 << 20, nil, [2]int{256 << 10, 256 << 10}, true},
		// 5 ranks on one host (20 rings: 5 MiB at 256 KiB), 4 on the other (12: 6 MiB at 512 KiB).
		{"np9/two-hosts/6MiB", 9, DataPathAuto, 6 << 20, twoHosts, [2]int{256 << 10, 512 << 10}, false},
		{"np1/default", 1, DataPathShm, 0, nil, [2]int{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := Config{Size: tc.size, Secret: "ring size " + t.Name(), DataPath: tc.dataPath, Security: SecurityNone,
				ShmHostBudget: tc.budget, JoinTimeout: 60 * time.Second, Logger: quiet}
			eps := startJob(t, base, tc.perRank)
			checkPaths(t, eps)
			pipes := 0
			for r, ep := range eps {
				for peer, c := range linksOf(ep) {
					if peer == r {
						continue
					}
					p, ok := c.(*shm.Pipe)
					if !ok {
						if tc.perRank == nil || r%2 == peer%2 {
							t.Errorf("rank %d to rank %d: a %T, want a shared-memory pipe", r, peer, c)
						}
						continue
					}
					pipes++
					if got, want := p.RingSize(), tc.want[r%2]; got != want {
						t.Errorf("rank %d to rank %d: ring size %d, want %d", r, peer, got, want)
					}
				}
			}
			if tc.perRank == nil && pipes != tc.size*(tc.size-1) {
				t.Errorf("%d pipe ends, want %d", pipes, tc.size*(tc.size-1))
			}
			if tc.allReduce {
				checkAllReduce(t, eps)
			} else {
				exchangeAll(t, eps)
			}
		})
	}
}

func TestValidateShmHostBudget(t *testing.T) {
	for _, b := range []int64{-1, -1 << 40} {
		c := Config{Size: 2, Rank: 1, Secret: "s", Rendezvous: "127.0.0.1:1", ShmHostBudget: b}
		err := c.Validate()
		for _, want := range []string{"ShmHostBudget", "rank 1", fmt.Sprint(b)} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ShmHostBudget %d: Validate() = %v; want an error naming %q", b, err, want)
			}
		}
	}
}
