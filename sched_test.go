package hetsync_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/internal/schedpolicy"
)

// ownSched is the policy of this test process, which a rank that inherits it reports.
func ownSched(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		return string(schedpolicy.Inherit) // what Init records where it sets nothing
	}
	pols, err := schedpolicy.ThreadPolicies(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return pols[os.Getpid()]
}

// A scheduling policy Init does not know is an error naming the rank and the option or the
// variable it came from, before the rank joins anything.
func TestInitSchedErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  hetsync.Option
		env  string
		want string
	}{
		{"option", hetsync.WithSched("rr"), "", `rank 1: WithSched("rr") "rr": unknown scheduling policy`},
		{"variable", nil, "fifo", `rank 1: HETSYNC_SCHED "fifo": unknown scheduling policy`},
		{"option over a good variable", hetsync.WithSched(""), "batch", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := launchers[0].env(1, 2, "1")
			env["HETSYNC_SCHED"] = tc.env
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a policy that parses goes on to join, which then ends at once
			_, err := hetsync.Init(ctx, envOf(env), tc.opt)
			if tc.want == "" {
				if err == nil || strings.Contains(err.Error(), "scheduling policy") {
					t.Fatalf("error %v, want the join's, not the policy's", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to name %q", err, tc.want)
			}
		})
	}
}
