package hetsync_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// outsideProgram is a user's package in a module of its own that imports hetsync.
const outsideProgram = `// Package outside sums over in-process ranks through hetsync.
package outside

import (
	"context"

	"github.com/hetsync/hetsync"
)

// Sum adds every rank's 1 on n in-process ranks.
func Sum(ctx context.Context, n int) error {
	return hetsync.InitLocal(ctx, n, func(ctx context.Context, c *hetsync.Comm) error {
		x := []float32{1}
		return c.AllReduce(ctx, hetsync.F32(x), hetsync.Sum)
	})
}
`

// TestOutsideModuleBuildsAgainstCheckout runs the two ways the README and docs/using.md give
// for using this checkout from a module of one's own (the module is not on a proxy, so
// `go get` cannot fetch it): a go.work that uses the checkout, and a require and replace line
// in go.mod. It runs offline (GOPROXY=off) on the module and build caches this repository's
// own build filled, so the user's package compiles in about a second. The replace form
// borrows the checkout's go.sum where a user runs `go mod tidy`, which would look up the test
// dependencies of hetsync's dependencies on the proxy.
func TestOutsideModuleBuildsAgainstCheckout(t *testing.T) {
	checkout, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup [][]string // go commands run in the user's module before it builds
		env   []string
	}{
		{"go work use", [][]string{{"work", "init", "."}, {"work", "use", checkout}}, nil},
		{"replace", [][]string{
			{"mod", "edit", "-require=github.com/hetsync/hetsync@v0.0.0", "-replace=github.com/hetsync/hetsync=" + checkout},
		}, []string{"GOWORK=off", "GOFLAGS=-mod=mod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, text string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("go.mod", "module example.com/outside\n\ngo 1.26.0\n")
			write("outside.go", outsideProgram)
			if tc.name == "replace" {
				sum, err := os.ReadFile(filepath.Join(checkout, "go.sum"))
				if err != nil {
					t.Fatal(err)
				}
				write("go.sum", string(sum))
			}
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
					env = append(env, kv)
				}
			}
			// the last value of a variable wins: offline, whatever the caller's environment says
			env = append(append(env, "GOPROXY=off", "GOSUMDB=off"), tc.env...)
			for _, args := range append(tc.setup, []string{"build", "./..."}) {
				cmd := exec.Command("go", args...)
				cmd.Dir, cmd.Env = dir, env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go %s in a module outside the checkout: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
		})
	}
}
