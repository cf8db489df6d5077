package netns

import (
	"context"
	"os"
	"testing"
)

// ForTest builds spec's network for t and removes it when t ends. Where networks cannot be
// built it skips t, except under CI (CI=true runs as root with iproute2 installed by `make
// test`), where a test that cannot run is a failure.
func ForTest(t testing.TB, spec Spec) *Net {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("netns: %v (CI runs as root with iproute2)", err)
		}
		t.Skipf("netns: %v: run as root for the tests across network namespaces", err)
	}
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
