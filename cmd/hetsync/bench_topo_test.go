package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/netns"
	"github.com/hetsync/hetsync/launcher"
)

// runInNetns runs one bench job with rank r in host hostOf[r]'s namespace of n, over plain
// TCP between the namespaces, every rank planning from the matrix the network promises, or,
// with plan set, as --plan-links plan says ("-": the default). It returns rank 0's output; a
// failed rank fails the test.
func runInNetns(t *testing.T, n *netns.Net, hostOf []int, plan string, args ...string) string {
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
	args = append([]string{"bench", "--data-path", "tcp", "--security", "none", "--join-timeout", "60s"}, args...)
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Run()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d on host %d: %v\n%s", r, hostOf[r], err, outs[r].String())
		}
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
