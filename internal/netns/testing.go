package netns

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
)

// RequireAvailable skips t where networks of namespaces cannot be built, except under CI
// (CI=true runs as root with iproute2 installed by `make test`), where a test that cannot run
// is a failure.
func RequireAvailable(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("netns: %v (CI runs as root with iproute2)", err)
		}
		t.Skipf("netns: %v: run as root for the tests across network namespaces", err)
	}
}

// ForTest builds spec's network for t and removes it when t ends; see RequireAvailable for
// where it cannot.
func ForTest(t testing.TB, spec Spec) *Net {
	t.Helper()
	RequireAvailable(t)
	n, err := Up(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(context.Background()); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})
	return n
}

// RunRanks starts this test binary once per rank, rank r in host hostOf[r]'s namespace with
// env(r) added to its environment (the binary's TestMain must act on it and not run the
// tests), waits for all of them and returns each one's standard output. A rank that fails
// fails t, with its output.
func (n *Net) RunRanks(ctx context.Context, t testing.TB, hostOf []int, env func(r int) []string) [][]byte {
	t.Helper()
	for r, h := range hostOf {
		if h < 0 || h >= len(n.Hosts) {
			t.Fatalf("netns: rank %d on host %d of %d", r, h, len(n.Hosts))
		}
	}
	outs := make([][]byte, len(hostOf))
	var wg sync.WaitGroup
	for r, h := range hostOf {
		cmd := n.Command(ctx, h, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env(r)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Go(func() {
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("rank %d in namespace %s: %v\nstdout: %s\nstderr: %s", r, n.Hosts[h].Namespace, err, out, stderr.String())
			}
			outs[r] = out
		})
	}
	wg.Wait()
	return outs
}
