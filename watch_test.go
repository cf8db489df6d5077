package hetsync_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
)

// A malformed reporting variable or option is an error naming it, before anything is joined.
func TestWatchSettingsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		opts []hetsync.Option
		want []string
	}{
		{"peer timeout", map[string]string{hetsync.EnvPeerTimeout: "soon"}, nil, []string{hetsync.EnvPeerTimeout, `"soon"`}},
		{"stall", map[string]string{hetsync.EnvStall: "5"}, nil, []string{hetsync.EnvStall, `"5"`}},
		{"log level variable", map[string]string{hetsync.EnvLog: "loud"}, nil, []string{hetsync.EnvLog, `"loud"`}},
		{"log level option", nil, []hetsync.Option{hetsync.WithLogLevel("trace")}, []string{`WithLogLevel("trace")`}},
		{"timeline in a missing directory", map[string]string{hetsync.EnvTimeline: "/nonexistent/dir/t.json"}, nil, []string{"timeline", "/nonexistent/dir/t.rank0.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			initFails(t, append([]hetsync.Option{envOf(tc.env)}, tc.opts...), tc.want)
		})
	}
}

// InitLocal with a timeline writes one file per rank, each a trace-event array with the
// rank's calls.
func TestTimelinePerRank(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.json")
	for _, n := range []int{1, 3} {
		err := hetsync.InitLocal(context.Background(), n, func(ctx context.Context, c *hetsync.Comm) error {
			return c.AllReduce(ctx, collective.F32(make([]float32, 13)), collective.Sum)
		}, hetsync.WithTimeline(path), envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		for r := range n {
			b, err := os.ReadFile(collective.TimelinePath(path, r))
			if err != nil {
				t.Fatal(err)
			}
			var evs []struct{ Name, Ph string }
			if err := json.Unmarshal(b, &evs); err != nil {
				t.Fatalf("n=%d rank %d: %v", n, r, err)
			}
			calls := 0
			for _, e := range evs {
				if e.Ph == "X" && e.Name == "allreduce" {
					calls++
				}
			}
			// The job's Comm runs Init's barrier only over a network; InitLocal's Comm runs
			// the program's one allreduce.
			if calls != 1 {
				t.Errorf("n=%d rank %d: %d allreduce events, want 1", n, r, calls)
			}
		}
	}
}
