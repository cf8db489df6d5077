package collective_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// TestAutoSharedMemoryOverP2P: ranks of one host joined over shared-memory pipes plan on
// auto's shared-memory model, ranks joined over TCP loopback on the network's. At p = 2 and
// 1 MiB the two differ: butterfly on shared memory, where recursive doubling's reduction of
// the whole vector costs more than the message it saves, recursive doubling on the network
// model.
func TestAutoSharedMemoryOverP2P(t *testing.T) {
	const p, n = 2, 1 << 20 / 4
	for _, tc := range []struct{ path, want string }{
		{p2p.DataPathShm, "butterfly"},
		{p2p.DataPathTCP, "recursive-doubling"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "auto shm " + tc.path, Security: p2p.SecurityNone,
				DataPath: tc.path, Logger: slog.New(slog.DiscardHandler)}, nil)
			err := eachRank(p, func(r int) error {
				c, err := collective.New(eps[r], collective.Options{})
				if err != nil {
					return err
				}
				ch, err := c.AllReduceChoice(n, collective.Float32)
				if err != nil {
					return err
				}
				if ch.Algorithm != tc.want {
					return fmt.Errorf("rank %d over %s: auto chose %s, want %s", r, tc.path, ch.Algorithm, tc.want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
