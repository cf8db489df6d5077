package p2p

import (
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// TestConnectionsFollowSchedules forms a job of 128 ranks over real libp2p hosts and TCP
// sockets (16 hosts of 8 ranks, as the host names tell), runs a ring and a butterfly allreduce
// with every result checked, and counts what each rank holds open: its data connections and
// its libp2p connections (rendezvous, table and heartbeats). Both must stay within a small
// multiple of log2 p plus the host's own ranks: the links a ring and a butterfly schedule
// use (2 neighbours, log2 p partners), not the p-1 peers of a full mesh.
func TestConnectionsFollowSchedules(t *testing.T) {
	const size, perHost = 128, 8
	base := Config{Size: size, Secret: "connections " + t.Name(), DataPath: DataPathTCP, Security: SecurityNone,
		JoinTimeout: 60 * time.Second, Logger: quiet}
	start := time.Now()
	eps := formJobWith(t, base, func(r int, c *Config) { c.Hostname = fmt.Sprintf("host-%d", r/perHost) }, hooks{})

	t.Logf("formed in %v", time.Since(start))
	// Ring and butterfly, over a length that is not a multiple of the rank count.
	checkAllReduceOf(t, eps, []string{"ring"}, []int{1001})
	t.Logf("ring in %v", time.Since(start))
	checkAllReduceOf(t, eps, []string{"butterfly"}, []int{1001})
	t.Logf("butterfly in %v", time.Since(start))

	logp := bits.Len(uint(size - 1))
	maxData, maxTotal := 2*logp, 4*logp+perHost
	// A libp2p connection closed by its other end (a rank that fetched the table from this
	// one) leaves this side's count when libp2p has read the close: wait for that, not a time.
	var data, libp2p []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		data, libp2p = connectionCounts(eps)
		over := -1
		for r := range eps {
			if data[r] > maxData || data[r]+libp2p[r] > maxTotal {
				over = r
				break
			}
		}
		lone := oneSidedLink(eps)
		if over < 0 && lone == nil {
			break
		}
		if time.Now().After(deadline) {
			if lone != nil {
				t.Fatalf("rank %d holds a connection to rank %d, which holds none to it: two crossing dials kept two connections or none", lone[0], lone[1])
			}
			t.Fatalf("rank %d holds %d data and %d libp2p connections in a job of %d ranks; want at most %d data and %d in all",
				over, data[over], libp2p[over], size, maxData, maxTotal)
		}
	}
	mostData, most := 0, 0
	for r := range eps {
		mostData, most = max(mostData, data[r]), max(most, data[r]+libp2p[r])
	}
	t.Logf("%d ranks: at most %d data connections per rank and %d with the libp2p ones; rank 0 holds %d data and %d libp2p; a full mesh is %d of each",
		size, mostData, most, data[0], libp2p[0], size-1)
}

// oneSidedLink returns a pair (r, q) where r holds a data connection to q and q none to r, or
// nil: after traffic in both directions both ends hold the one connection of the pair.
func oneSidedLink(eps []transport.Endpoint) []int {
	rows := make([][]bool, len(eps))
	for r, ep := range eps {
		rows[r] = ep.(*endpoint).Endpoint.(transport.Linked).Linked()
	}
	for r := range rows {
		for q, up := range rows[r] {
			if up && !rows[q][r] {
				return []int{r, q}
			}
		}
	}
	return nil
}

// connectionCounts returns, per rank, its data connections and its open libp2p connections.
func connectionCounts(eps []transport.Endpoint) (data, libp2p []int) {
	data, libp2p = make([]int, len(eps)), make([]int, len(eps))
	for r, ep := range eps {
		for _, up := range ep.(*endpoint).Endpoint.(transport.Linked).Linked() {
			if up {
				data[r]++
			}
		}
		libp2p[r] = len(ep.(*endpoint).host.Network().Conns())
	}
	return data, libp2p
}

// TestDataPathsBeforeLinks: a rank reports for a peer it has not talked to yet the path the
// pair is to take, so that every rank of a one-host job sees shared memory everywhere (auto
// plans on it) whichever pairs have linked: here only rank 0's, which the arena exchange
// opened.
func TestDataPathsBeforeLinks(t *testing.T) {
	base := Config{Size: 3, Secret: "paths " + t.Name(), DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	eps := formJobWith(t, base, nil, hooks{})
	if linksOf(eps[1])[2] != nil {
		t.Fatal("ranks 1 and 2 linked without talking")
	}
	for r, ep := range eps {
		for q, path := range ep.(*endpoint).DataPaths() {
			if want := map[bool]string{true: "", false: DataPathShm}[q == r]; path != want {
				t.Errorf("rank %d: the path to rank %d is %q, want %q", r, q, path, want)
			}
		}
	}
}
