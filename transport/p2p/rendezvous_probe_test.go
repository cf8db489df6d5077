package p2p

import (
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// TestDuplicateOfRunningRank: a second process with the number of a rank of a job that has
// already formed is told so by rank 0, and the running job is unharmed.
func TestDuplicateOfRunningRank(t *testing.T) {
	for _, security := range []string{SecurityTLS, SecurityNone} {
		t.Run(security, func(t *testing.T) {
			base := Config{Size: 3, Secret: "running " + t.Name(), Security: security, DataPath: DataPathStream,
				JoinTimeout: 20 * time.Second, Logger: quiet}
			addr, res0 := startRank0(t, base)
			c1, c2 := startRank(base, 1, addr), startRank(base, 2, addr)
			eps := make([]transport.Endpoint, 3)
			for r, c := range []<-chan result{res0, c1, c2} {
				res := <-c
				if res.err != nil {
					t.Fatalf("rank %d: %v", r, res.err)
				}
				eps[r] = res.ep
			}
			defer closeAll(eps)
			dup := <-startRank(base, 2, addr)
			if dup.err == nil {
				dup.ep.Close()
				t.Fatal("a second rank 2 joined the running job")
			}
			want := "rank 2: cannot join rank 0 at " + addr + ": rank 0 refused: the job has already formed: all 3 ranks joined, rank 2 among them"
			if !strings.Contains(dup.err.Error(), want) {
				t.Errorf("the duplicate's error:\n%v\nwant it to contain\n%s", dup.err, want)
			}
			// The job still moves bytes between its ranks.
			exchangeAll(t, eps)
		})
	}
}
