package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/netns"
)

// envNetnsRank makes the test binary one rank of TestHostsAcrossNetworkNamespaces: its value
// is the rank's netnsArgs as JSON, and it prints a netnsReport.
const envNetnsRank = "HETSYNC_P2P_NETNS_RANK"

type netnsArgs struct {
	Rank, Size         int
	Rendezvous, Secret string
	DataPath, Hostname string
	JoinTimeoutSeconds float64
}

type netnsReport struct {
	Rank  int      `json:"rank"`
	Err   string   `json:"err,omitempty"`
	Paths []string `json:"paths,omitempty"` // per rank: the data path to it
	Same  []bool   `json:"same,omitempty"`  // per rank: SameHost
	Arena bool     `json:"arena,omitempty"` // the job formed with an arena
}

// netnsRank joins as one rank, prints what it got and closes.
func netnsRank(arg string) int {
	var a netnsArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, "netns rank:", err)
		return 3
	}
	rep := netnsReport{Rank: a.Rank}
	ep, err := Join(context.Background(), Config{Rank: a.Rank, Size: a.Size, Rendezvous: a.Rendezvous,
		Secret: a.Secret, DataPath: a.DataPath, Hostname: a.Hostname, Security: SecurityNone,
		JoinTimeout: time.Duration(a.JoinTimeoutSeconds * float64(time.Second)), Logger: quiet})
	if err == nil {
		if err = linkEveryPeer(context.Background(), ep); err != nil {
			ep.Close()
		}
	}
	if err != nil {
		rep.Err = err.Error()
	} else {
		e := ep.(*endpoint)
		rep.Same = e.SameHost()
		rep.Arena = e.Arena() != nil
		for r, c := range linksOf(e) {
			if r == a.Rank {
				rep.Paths = append(rep.Paths, "")
			} else {
				rep.Paths = append(rep.Paths, connPath(c))
			}
		}
		defer ep.Close()
	}
	b, _ := json.Marshal(rep)
	fmt.Printf("%s\n", b)
	return 0
}

// runNetnsJob starts rank r of a job in namespace nsOf[r] (rank 0 listens on its host's
// address) and returns every rank's report.
func runNetnsJob(t *testing.T, n *netns.Net, nsOf []int, dataPath string, hostname func(r int) string) []netnsReport {
	t.Helper()
	rendezvous := net.JoinHostPort(n.Hosts[nsOf[0]].Addr, strconv.Itoa(20000+rand.IntN(20000)))
	// A secret of this job alone: the Unix socket names derive from it, and a rank of an
	// earlier, interrupted run of the same test may still hold its name.
	secret := fmt.Sprintf("netns %s %x", t.Name(), rand.Uint64())
	outs := n.RunRanks(t.Context(), t, nsOf, func(r int) []string {
		args, _ := json.Marshal(netnsArgs{Rank: r, Size: len(nsOf), Rendezvous: rendezvous, Secret: secret,
			DataPath: dataPath, Hostname: hostname(r), JoinTimeoutSeconds: 20})
		return []string{envNetnsRank + "=" + string(args)}
	})
	reports := make([]netnsReport, len(nsOf))
	for r, out := range outs {
		if err := json.Unmarshal(out, &reports[r]); err != nil {
			t.Fatalf("rank %d: %v in its output %q", r, err, out)
		}
	}
	return reports
}

// TestHostsAcrossNetworkNamespaces: ranks in different network namespaces of one machine, with
// one host name and no override, do not share memory or Unix sockets (the shared-memory
// directory is the same, the namespace is not), while ranks in one namespace still do.
func TestHostsAcrossNetworkNamespaces(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Uniform, Hosts: 2, Unshaped: true})
	nsOf := []int{0, 0, 1, 1, 0}
	none := func(int) string { return "" }
	t.Run("auto", func(t *testing.T) {
		for _, rep := range runNetnsJob(t, n, nsOf, DataPathAuto, none) {
			if rep.Err != "" {
				t.Fatalf("rank %d: %s", rep.Rank, rep.Err)
			}
			if rep.Arena {
				t.Errorf("rank %d has an arena in a job across two network namespaces", rep.Rank)
			}
			for q := range nsOf {
				if q == rep.Rank {
					continue
				}
				same := nsOf[q] == nsOf[rep.Rank]
				want := DataPathTCP
				if same {
					want = DataPathShm
				}
				if rep.Paths[q] != want || rep.Same[q] != same {
					t.Errorf("rank %d (namespace %d) to rank %d (namespace %d): path %s, same host %v; want %s, %v",
						rep.Rank, nsOf[rep.Rank], q, nsOf[q], rep.Paths[q], rep.Same[q], want, same)
				}
			}
		}
	})
	t.Run("one namespace forms an arena", func(t *testing.T) {
		for _, rep := range runNetnsJob(t, n, []int{1, 1, 1}, DataPathAuto, none) {
			if rep.Err != "" || !rep.Arena {
				t.Errorf("rank %d: arena %v, error %q; want an arena on every rank of one namespace", rep.Rank, rep.Arena, rep.Err)
			}
		}
	})
	t.Run("equal explicit names do not join namespaces", func(t *testing.T) {
		for _, rep := range runNetnsJob(t, n, nsOf, DataPathAuto, func(int) string { return "one-name" }) {
			for q := range nsOf {
				if rep.Err != "" || (q != rep.Rank && rep.Same[q] != (nsOf[q] == nsOf[rep.Rank])) {
					t.Errorf("rank %d: same host %v, error %q", rep.Rank, rep.Same, rep.Err)
					break
				}
			}
		}
	})
	t.Run("shm across namespaces is an error naming both ranks", func(t *testing.T) {
		for _, rep := range runNetnsJob(t, n, nsOf[:3], DataPathShm, none) {
			// Every rank belongs to a pair across namespaces and reports one of its pairs.
			if rep.Err == "" || !strings.Contains(rep.Err, "network namespace") || !strings.Contains(rep.Err, "do not share a host") {
				t.Errorf("rank %d: error %q; want one naming the pair and its network namespaces", rep.Rank, rep.Err)
			}
			if rep.Rank == 2 {
				if !strings.Contains(rep.Err, "rank 0 (host") || !strings.Contains(rep.Err, "rank 2 (host") {
					t.Errorf("rank 2: error %q does not name ranks 0 and 2", rep.Err)
				}
				t.Log(rep.Err)
			}
		}
	})
}
