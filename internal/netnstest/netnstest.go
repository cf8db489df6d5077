// Package netnstest gives tests several "hosts" on one machine: network namespaces with their
// own addresses on one bridge, links optionally shaped with tc's tbf, and commands run inside
// them. It needs root; under CI (CI set) a missing privilege or tool fails the test instead
// of skipping it, so CI always runs what depends on it.
//
// It must never leave a namespace, bridge or qdisc behind a test (everything is removed by
// t.Cleanup), nor touch interfaces it did not create.
package netnstest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Hosts are n network namespaces on one bridge of the test's namespace: host i is Names[i],
// with address Addrs[i] on its interface "hs0"; the test's namespace has Gateway on the bridge.
type Hosts struct {
	Names, Addrs []string
	Gateway      string
}

// Iface is the interface of each namespace on the bridge.
const Iface = "hs0"

// New makes n hosts, removed when the test ends. The subnet is random, so that concurrent
// tests do not meet.
func New(t testing.TB, n int) *Hosts {
	t.Helper()
	need(t, os.Geteuid() == 0, "network namespaces need root")
	_, err := exec.LookPath("ip")
	need(t, err == nil, "the ip command (Debian's iproute2) is missing")
	id := rand.IntN(200) + 20
	tag := fmt.Sprintf("nt%d%03d", os.Getpid()%1000, id)
	bridge := tag + "b"
	subnet := fmt.Sprintf("10.78.%d.", id)
	h := &Hosts{Gateway: subnet + "1"}
	t.Cleanup(func() {
		for _, ns := range h.Names {
			_ = exec.Command("ip", "netns", "del", ns).Run() // takes its veth pair along
		}
		_ = exec.Command("ip", "link", "del", bridge).Run()
	})
	run(t, "ip", "link", "add", bridge, "type", "bridge")
	run(t, "ip", "addr", "add", h.Gateway+"/24", "dev", bridge)
	run(t, "ip", "link", "set", bridge, "up")
	for i := range n {
		ns, veth := fmt.Sprintf("%s-%d", tag, i), fmt.Sprintf("%sv%d", tag, i)
		run(t, "ip", "netns", "add", ns)
		h.Names = append(h.Names, ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		run(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", Iface, "netns", ns)
		run(t, "ip", "link", "set", veth, "master", bridge)
		run(t, "ip", "link", "set", veth, "up")
		addr := subnet + strconv.Itoa(i+2)
		run(t, "ip", "-n", ns, "addr", "add", addr+"/24", "dev", Iface)
		run(t, "ip", "-n", ns, "link", "set", Iface, "up")
		h.Addrs = append(h.Addrs, addr)
	}
	return h
}

// Shape limits what host i sends to the bridge with a token bucket: rate as tc writes it
// ("100mbit"), with the given burst ("32kb") and queueing latency ("50ms").
func (h *Hosts) Shape(t testing.TB, i int, rate, burst, latency string) {
	t.Helper()
	run(t, "ip", "netns", "exec", h.Names[i], "tc", "qdisc", "add", "dev", Iface, "root", "tbf",
		"rate", rate, "burst", burst, "latency", latency)
}

// Command is name with args run inside host i's namespace.
func (h *Hosts) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Names[i], name}, args...)...)
}

// RunRanks starts this test binary once per rank, rank r in host nsOf[r]'s namespace with
// env(r) added to the environment (the binary's TestMain must act on it and not run the
// tests), waits for all of them and returns each one's standard output. A rank that fails
// fails the test, with its output.
func (h *Hosts) RunRanks(t testing.TB, nsOf []int, env func(r int) []string) [][]byte {
	t.Helper()
	outs := make([][]byte, len(nsOf))
	var wg sync.WaitGroup
	for r, ns := range nsOf {
		cmd := h.Command(ns, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env(r)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("rank %d in namespace %s: %v\nstdout: %s\nstderr: %s", r, h.Names[ns], err, out, stderr.String())
			}
			outs[r] = out
		}()
	}
	wg.Wait()
	return outs
}

func need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI must run the tests across network namespaces)", why)
	}
	t.Skipf("%s: run as root (CI does) for the tests across network namespaces", why)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
