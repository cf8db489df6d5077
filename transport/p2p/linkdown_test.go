package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/netns"
	"github.com/hetsync/hetsync/transport"
)

// envLinkRank makes the test binary one rank of TestLinkDownIsUnreachable: its value is the
// rank's linkArgs as JSON. The rank joins, says so with a file once it has a heartbeat round
// trip with its peer, waits on a receive from the peer and prints how that receive ended.
const envLinkRank = "HETSYNC_P2P_LINK_RANK"

type linkArgs struct {
	Rank               int
	Rendezvous, Secret string
	Dir                string
}

func linkRank(arg string) int {
	var a linkArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, "link rank:", err)
		return 3
	}
	ep, err := Join(context.Background(), Config{Rank: a.Rank, Size: 2, Rendezvous: a.Rendezvous, Secret: a.Secret,
		DataPath: DataPathTCP, Security: SecurityNone, JoinTimeout: 20 * time.Second, PeerTimeout: time.Second, Logger: quiet})
	if err != nil {
		fmt.Printf("join: %v\n", err)
		return 0
	}
	defer ep.Close()
	if err := linkEveryPeer(context.Background(), ep); err != nil {
		fmt.Printf("join: %v\n", err)
		return 0
	}
	peer := 1 - a.Rank
	live, _ := transport.LivenessOf(ep)
	for live.Peer(peer).RTT == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "joined."+strconv.Itoa(a.Rank)), nil, 0o600); err != nil {
		fmt.Printf("join: %v\n", err)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = ep.Recv(ctx, peer, transport.Header{Seq: 1}, make([]byte, 8))
	fmt.Printf("recv: %v\n", err)
	// Stay until the peer has its verdict too: a rank that exits first would be seen gone by
	// the other, which would then rightly report a peer that exited instead of the link.
	if err := os.WriteFile(filepath.Join(a.Dir, "done."+strconv.Itoa(a.Rank)), nil, 0o600); err != nil {
		fmt.Printf("done: %v\n", err)
		return 0
	}
	for !exists(filepath.Join(a.Dir, "done."+strconv.Itoa(peer))) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// Two hosts (network namespaces of one machine) whose link is taken down while both processes
// live: each rank fails the other within the peer timeout (its running process is not taken
// for a starved one), and the error says the peer is alive but unreachable, the network down.
func TestLinkDownIsUnreachable(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Uniform, Hosts: 2, Unshaped: true})
	dir := t.TempDir()
	rendezvous := net.JoinHostPort(n.Hosts[0].Addr, strconv.Itoa(20000+rand.IntN(20000)))
	secret := fmt.Sprintf("link down %s %x", t.Name(), rand.Uint64())
	outc := make(chan [][]byte, 1)
	go func() {
		outc <- n.RunRanks(t.Context(), t, []int{0, 1}, func(r int) []string {
			args, _ := json.Marshal(linkArgs{Rank: r, Rendezvous: rendezvous, Secret: secret, Dir: dir})
			return []string{envLinkRank + "=" + string(args)}
		})
	}()
	deadline := time.Now().Add(time.Minute)
	for r := range 2 {
		for !exists(filepath.Join(dir, "joined."+strconv.Itoa(r))) {
			select {
			case outs := <-outc:
				t.Fatalf("the ranks ended before both joined: %q", outs)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the ranks did not join within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if out, err := n.Command(t.Context(), 1, "ip", "link", "set", "eth0", "down").CombinedOutput(); err != nil {
		t.Fatalf("taking host 1's link down: %v: %s", err, out)
	}
	outs := <-outc
	for r, out := range outs {
		got := string(out)
		want := fmt.Sprintf("rank %d is unresponsive", 1-r)
		if !strings.HasPrefix(got, "recv: ") || !strings.Contains(got, want) ||
			!strings.Contains(got, "unreachable: its process is running (on this machine, in another network namespace), so the network between the hosts is down") {
			t.Errorf("rank %d: %q; want %q, unreachable, and the network named", r, got, want)
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
