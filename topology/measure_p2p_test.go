package topology_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/netns"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// envRank makes the test binary one rank of a job across network namespaces: its value is the
// rank's rankArgs as JSON; it joins, measures and prints a rankReport.
const envRank = "HETSYNC_TOPOLOGY_NETNS_RANK"

type rankArgs struct {
	Rank, Size         int
	Rendezvous, Secret string
}

type rankReport struct {
	Seconds float64          `json:"seconds"` // time of Measure
	Matrix  *topology.Matrix `json:"matrix"`
}

func TestMain(m *testing.M) {
	if arg := os.Getenv(envRank); arg != "" {
		os.Exit(netnsRank(arg))
	}
	os.Exit(m.Run())
}

func netnsRank(arg string) int {
	var a rankArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, "topology rank:", err)
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ep, err := p2p.Join(ctx, p2p.Config{Rank: a.Rank, Size: a.Size, Rendezvous: a.Rendezvous, Secret: a.Secret,
		Security: p2p.SecurityNone, JoinTimeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer ep.Close()
	start := time.Now()
	m, err := topology.Measure(ctx, ep, topology.MeasureOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	b, _ := json.Marshal(rankReport{Seconds: time.Since(start).Seconds(), Matrix: m})
	fmt.Printf("%s\n", b)
	return 0
}

// measureInNamespaces runs rank r in host nsOf[r]'s namespace, rank 0 listening on its host's
// address, and returns every rank's report.
func measureInNamespaces(t *testing.T, n *netns.Net, nsOf []int) []rankReport {
	t.Helper()
	rendezvous := net.JoinHostPort(n.Hosts[nsOf[0]].Addr, strconv.Itoa(20000+rand.IntN(20000)))
	outs := n.RunRanks(t.Context(), t, nsOf, func(r int) []string {
		args, _ := json.Marshal(rankArgs{Rank: r, Size: len(nsOf), Rendezvous: rendezvous, Secret: "topology " + t.Name()})
		return []string{envRank + "=" + string(args)}
	})
	reps := make([]rankReport, len(nsOf))
	for r, out := range outs {
		if err := json.Unmarshal(out, &reps[r]); err != nil || reps[r].Matrix == nil {
			t.Fatalf("rank %d: no report (%v) in %q", r, err, out)
		}
	}
	return reps
}

func matrices(reps []rankReport) []*topology.Matrix {
	ms := make([]*topology.Matrix, len(reps))
	for r, rep := range reps {
		ms[r] = rep.Matrix
	}
	return ms
}

// TestMeasureAcrossNetworkNamespaces: 8 ranks on 4 namespace hosts, two per host, with one
// host name: the matrix has 4 hosts and the same bytes on every rank.
func TestMeasureAcrossNetworkNamespaces(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Uniform, Hosts: 4, Unshaped: true})
	nsOf := []int{0, 0, 1, 1, 2, 2, 3, 3}
	reps := measureInNamespaces(t, n, nsOf)
	topology.CheckMeasured(t, matrices(reps), nsOf)
	m := reps[0].Matrix
	t.Logf("Measure took %.3f s on rank 0 (8 ranks, 4 hosts); same host %.1f us %.0f MB/s, across %.1f us %.0f MB/s",
		reps[0].Seconds, m.Links[0][1].Alpha*1e6, 1/m.Links[0][1].Beta/1e6, m.Links[0][2].Alpha*1e6, 1/m.Links[0][2].Beta/1e6)
}

// TestMeasureShapedLink: two namespace hosts whose links are shaped each way measure with the
// default probes a β within 25 % of the rate, in both directions: a 100 Mbit/s link with a
// 32 KiB bucket and 50 ms of queue, and a 400 Mbit/s link with the script's bucket of 10 ms of
// traffic, which a probe of 1 MiB reads at about twice the rate (a faster link would measure
// the two shared cores as much as the link).
//
// A link read faster than its rate fails at once. One read slower is measured again, up to
// three times in all: on a loaded host the ranks that time the probes may wait for a core,
// which no shaping explains, so the fastest of the reads is the one that says what Measure
// sees of the link.
func TestMeasureShapedLink(t *testing.T) {
	const attempts = 3
	for _, spec := range []netns.Spec{
		{Topology: netns.Uniform, Hosts: 2, RateMbit: 100, BurstBytes: 32 << 10, Latency: 50 * time.Millisecond},
		{Topology: netns.Uniform, Hosts: 2, RateMbit: 400},
	} {
		t.Run(fmt.Sprintf("%d-mbit", spec.RateMbit), func(t *testing.T) {
			n := netns.ForTest(t, spec)
			want := 8.0 / (float64(spec.RateMbit) * 1e6) // seconds per byte
			for attempt := 1; ; attempt++ {
				reps := measureInNamespaces(t, n, []int{0, 1})
				topology.CheckMeasured(t, matrices(reps), []int{0, 1})
				slow := false
				for _, l := range [][2]int{{0, 1}, {1, 0}} {
					beta := reps[0].Matrix.Links[l[0]][l[1]].Beta
					t.Logf("read %d: rank %d -> %d: beta %.3g s/B (%.1f Mbit/s), want %.3g; measuring took %.2f s",
						attempt, l[0], l[1], beta, 8/beta/1e6, want, reps[0].Seconds)
					if beta < 0.75*want {
						t.Fatalf("rank %d -> %d: beta %.3g s/B (%.1f Mbit/s) is faster than the link, beyond 25%% of %.3g (%d Mbit/s)",
							l[0], l[1], beta, 8/beta/1e6, want, spec.RateMbit)
					}
					slow = slow || beta > 1.25*want
				}
				if !slow {
					return
				}
				if attempt == attempts {
					t.Fatalf("every one of %d reads was slower than 25%% beyond %.3g s/B (%d Mbit/s)", attempts, want, spec.RateMbit)
				}
			}
		})
	}
}

// TestMeasureP2P measures in-process p2p jobs whose ranks alternate between two explicit host
// names (which part ranks that would otherwise prove one host).
func TestMeasureP2P(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("np%d", p), func(t *testing.T) {
			host := make([]int, p)
			for r := range host {
				host[r] = r % 2
			}
			eps := p2ptest.JoinLoopback(t, p, p2p.Config{Secret: "measure " + t.Name(), Security: p2p.SecurityNone},
				func(r int, c *p2p.Config) { c.Hostname = fmt.Sprintf("host-%d", host[r]) })
			topology.CheckMeasured(t, topology.MeasureAll(t, eps, topology.MeasureOptions{}), host)
		})
	}
}
