package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/topology"
)

// TestPlanCommand: `hetsync plan` prints auto's choice and predicted time for every size of a
// described cluster (and every configuration's with --candidates), plans from a measured
// matrix file as well, and names the flag it refuses.
func TestPlanCommand(t *testing.T) {
	t.Run("a described cluster", func(t *testing.T) {
		code, out, stderr := runCLI(t, "plan", "--hosts", "32", "--ranks-per-host", "4", "-b", "4K", "-e", "4M", "-f", "32", "--candidates")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		for _, want := range []string{"128 ranks on 32 hosts", "auto runs", "\n4K ", "\n128K ", "\n4M ", "hier-ring/grouped", "ring/interleaved", "planned 3 sizes"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("a measured matrix", func(t *testing.T) {
		host := []int{0, 0, 1, 1, 2, 2}
		m := topology.Uniform(6, 50e-6, 1/25e6)
		copy(m.Host, host)
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "links.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCLI(t, "plan", "--links", path, "--op", "reducescatter", "-b", "1M", "-e", "1M")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		if !strings.Contains(out, "reducescatter, 6 ranks on 3 hosts: measured links from "+path) || !strings.Contains(out, "\n1M ") {
			t.Errorf("output:\n%s", out)
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--op", "broadcast"}, "--op broadcast"},
		{[]string{"--uplink-gbps", "0"}, "--uplink-gbps 0"},
		{[]string{"--groups", "0"}, "0 groups"},
		{[]string{"-b", "2"}, "-b 2"},
		{[]string{"--links", "/nonexistent.json"}, "--links"},
	} {
		code, _, stderr := runCLI(t, append([]string{"plan"}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("plan %v: exit %d, stderr %q; want a failure naming %q", tc.args, code, stderr, tc.want)
		}
	}
}
