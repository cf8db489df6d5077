package command

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/internal/netns"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/transport"
)

// runInNetns runs one bench job with rank r in host hostOf[r]'s namespace of n, over plain
// TCP between the namespaces, every rank planning from the matrix the network promises, or,
// with plan set, as --plan-links plan says ("-": the default). It returns rank 0's output; a
// failed rank fails the test.
func runInNetns(t *testing.T, n *netns.Net, hostOf []int, plan string, args ...string) string {
	t.Helper()
	return runInNetnsWatched(t, n, hostOf, plan, nil, args...)
}

// runInNetnsWatched is runInNetns calling watch, when not nil, with every line rank 0 writes
// as it writes it.
func runInNetnsWatched(t *testing.T, n *netns.Net, hostOf []int, plan string, watch func(line string), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := n.Links(ctx, hostOf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if plan == "" {
		plan = filepath.Join(t.TempDir(), "links.json")
		if err := os.WriteFile(plan, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if plan != "-" {
		args = append([]string{"--plan-links", plan}, args...)
	}
	// Two minutes to join: nine ranks in namespaces start slowly on a loaded two-core machine.
	args = append([]string{"bench", "--data-path", "tcp", "--security", "none", "--join-timeout", "2m"}, args...)
	bin := hetsyncBinary(t)
	p := len(hostOf)
	outs := make([]bytes.Buffer, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, h := range hostOf {
		local, size := 0, 0
		for q, g := range hostOf {
			if g == h {
				if q < r {
					local++
				}
				size++
			}
		}
		env := launcher.RankEnv{Rank: r, Size: p, LocalRank: local, LocalSize: size,
			Rendezvous: n.Hosts[hostOf[0]].Addr + ":29471", Secret: "5ec7e75ec7e75ec75ec7e75ec7e75ec7", Hostname: n.Hosts[h].Namespace}
		cmd := n.Command(ctx, h, bin, args...)
		cmd.Env = append(os.Environ(), env.Environ()...)
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if r == 0 && watch != nil {
			cmd.Stdout = io.MultiWriter(&outs[r], &lineWriter{watch: watch})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Run()
		}()
	}
	wg.Wait()
	// Every rank's account, not only the first failure's: a rank that never joined says why
	// in its own output, while rank 0 can only say that it is missing.
	var failed strings.Builder
	for r, err := range errs {
		if err != nil {
			fmt.Fprintf(&failed, "rank %d on host %d: %v\n", r, hostOf[r], err)
		}
	}
	if failed.Len() > 0 {
		for r := range outs {
			fmt.Fprintf(&failed, "--- rank %d on host %d:\n%s", r, hostOf[r], outs[r].String())
		}
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		stats, err := n.Stats(sctx)
		fmt.Fprintf(&failed, "--- the links' queues (%v):\n%s", err, stats)
		t.Fatal(failed.String())
	}
	return outs[0].String()
}

// TestBenchAcrossNetnsTopologies runs short allreduces of the matrix's configurations on the
// three shaped networks, with hosts of different rank counts, and checks every result: bench
// compares each checked iteration with the reference and fails on a wrong element.
func TestBenchAcrossNetnsTopologies(t *testing.T) {
	tests := []struct {
		spec   netns.Spec
		hostOf []int
	}{
		{netns.Spec{Topology: netns.Uniform, Hosts: 3, RateMbit: 200}, []int{0, 0, 1, 2, 2, 2}},
		{netns.Spec{Topology: netns.SlowHost, Hosts: 3, RateMbit: 200}, []int{0, 1, 2, 0, 1}},
		{netns.Spec{Topology: netns.Racks, Hosts: 4, RateMbit: 200}, []int{0, 2, 1, 3, 0, 3, 3}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s-%d-ranks", tc.spec.Topology, len(tc.hostOf)), func(t *testing.T) {
			n := netns.ForTest(t, tc.spec)
			out := runInNetns(t, n, tc.hostOf, "", "--collective", "auto,ring,hier-ring/grouped,hier-butterfly/interleaved",
				"-b", "4K", "-e", "260K", "-f", "8", "-n", "2", "-w", "1", "-c", "1")
			if got := strings.Count(out, "# Out of bounds values : 0 OK"); got != 4 {
				t.Fatalf("%d of 4 tables checked OK:\n%s", got, out)
			}
			// Every row is followed by what ran and what the simulator predicted for it.
			if got := strings.Count(out, ", predicted "); got != 4*3 {
				t.Errorf("%d prediction lines, want one under each of 12 rows:\n%s", got, out)
			}
		})
	}
}

// TestBenchPlansFromMeasuredLinks: on two racks joined by a thin link, a job across hosts
// measures its links when it forms (by default, and when told to), and auto and the
// configurations that need a matrix plan from the measured one: every row says what ran and
// what the simulator predicted from the measured costs, and every result is checked.
func TestBenchPlansFromMeasuredLinks(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Racks, Hosts: 4, RateMbit: 200})
	for _, plan := range []string{"-", "measure"} {
		t.Run(plan, func(t *testing.T) {
			out := runInNetns(t, n, []int{0, 1, 2, 3, 1}, plan, "--collective", "auto,hier-ring/grouped",
				"-b", "4K", "-e", "260K", "-f", "8", "-n", "2", "-w", "1", "-c", "1")
			if got := strings.Count(out, "# Out of bounds values : 0 OK"); got != 2 {
				t.Fatalf("%d of 2 tables checked OK:\n%s", got, out)
			}
			if got := strings.Count(out, "links=measure"); got != 2 {
				t.Errorf("%d tables note links=measure, want 2:\n%s", got, out)
			}
			if got := strings.Count(out, ", predicted "); got != 2*3 {
				t.Errorf("%d prediction lines, want one under each of 6 rows:\n%s", got, out)
			}
		})
	}
}

// lineWriter calls watch with every whole line written to it.
type lineWriter struct {
	watch func(string)
	part  []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.part = append(w.part, b...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.watch(string(w.part[:i]))
		w.part = w.part[i+1:]
	}
}

// TestBenchReplansWhenTheUplinkSlowsDown runs auto on two racks whose uplink is as fast as
// their access links (200 Mbit/s), and throttles the uplink to 20 Mbit/s once the first size
// is done: every call of the second size is checked against the reference, the ranks re-plan
// within its 18 calls, and what auto runs then is, on the throttled network, within 1.2x of
// the best configuration's predicted time.
func TestBenchReplansWhenTheUplinkSlowsDown(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Racks, Hosts: 4, RateMbit: 200, Ratio: 1})
	hostOf := []int{0, 1, 2, 3, 0, 2}
	const slow = 20
	var throttled atomic.Bool
	var lines strings.Builder // rank 0's output, as the watch saw it
	watch := func(line string) {
		lines.WriteString(line + "\n")
		if strings.Contains(line, "65536 B: runs") && throttled.CompareAndSwap(false, true) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := n.SetRate(ctx, 0, true, slow); err != nil {
				t.Error(err)
			}
		}
	}
	const checked = 16
	// The peer timeout is raised because throttling a saturated link tenfold can stall the TCP
	// flows across it for seconds (losses at the shrunken queue, retransmission backoff):
	// this test is about re-planning, and a stall is not a dead peer.
	runInNetnsWatched(t, n, hostOf, "", watch, "--collective", "auto", "--settle", "0", "--peer-timeout", "45s",
		"-b", "64K", "-e", "1M", "-f", "16", "-w", "0", "-n", "2", "-c", strconv.Itoa(checked))
	out := lines.String()
	if !throttled.Load() {
		t.Fatalf("the first size printed no prediction line to throttle after:\n%s", out)
	}
	if got := strings.Count(out, "# Out of bounds values : 0 OK"); got != 1 {
		t.Fatalf("the table did not check OK:\n%s", out)
	}
	rows := strings.SplitAfter(out, "65536 B: runs")
	var seq uint64
	var streak int
	var ms float64
	var from, now string
	i := strings.LastIndex(rows[1], "#  re-planned")
	if i < 0 {
		t.Fatalf("no re-plan after the uplink slowed down:\n%s", out)
	}
	if _, err := fmt.Sscanf(rows[1][i:], "#  re-planned after call #%d: %d calls off plan in a row, links measured in %f ms, %s -> %s",
		&seq, &streak, &ms, &from, &now); err != nil {
		t.Fatalf("reading the re-plan (%v):\n%s", err, out)
	}
	for _, line := range strings.Split(rows[1], "\n") {
		if _, name, ok := strings.Cut(line, "1048576 B: runs "); ok {
			if ran, _, _ := strings.Cut(name, ","); ran != now {
				t.Errorf("re-planned to %s, runs %s:\n%s", now, ran, out)
			}
		}
	}
	// The throttled network as its shaping now promises it: the links between the racks ten
	// times slower.
	m, err := n.Links(context.Background(), hostOf)
	if err != nil {
		t.Fatal(err)
	}
	for r := range m.P {
		for q := range m.P {
			if n.Hosts[hostOf[r]].Rack != n.Hosts[hostOf[q]].Rack {
				m.Links[r][q].Beta *= 200 / slow
			}
		}
	}
	predict := func(alg string) collective.Choice {
		t.Helper()
		eps := transport.NewMemJob(m.P)
		defer transport.CloseAll(eps)
		c, err := collective.New(eps[0], collective.Options{Algorithm: alg, Links: m})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := c.AllReduceChoice(1<<20/4, collective.Float32)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	best, got := predict("auto"), predict(now)
	t.Logf("re-planned after call #%d (%d calls off plan, links measured in %.0f ms), %s -> %s: %v on the throttled network, best %s %v",
		seq, streak, ms, from, now, got.Predicted, best.Algorithm, best.Predicted)
	if float64(got.Predicted) > 1.2*float64(best.Predicted) {
		t.Errorf("after the re-plan auto runs %s, predicted %v on the throttled network: more than 1.2x the best, %s at %v:\n%s",
			now, got.Predicted, best.Algorithm, best.Predicted, out)
	}
}
