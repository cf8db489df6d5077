package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/topology"
)

// TestBenchLinks: bench --links prints the matrix as a table or as JSON that topology reads,
// in process (mem) and over launched p2p ranks.
func TestBenchLinks(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, args ...string) (int, string, string)
		args []string
		p    int
	}{
		{"mem", runCLI, []string{"--transport", "mem", "--np", "3"}, 3},
		{"p2p", runBinary, []string{"--np", "2", "--security", "none"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/json", func(t *testing.T) {
			code, out, stderr := tc.run(t, append([]string{"bench", "--links", "--format", "json"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			m, err := topology.Unmarshal([]byte(out))
			if err != nil || m.P != tc.p || m.Hosts() != 1 || !strings.Contains(out, `"measure_s":`) {
				t.Fatalf("output %q: %v; want a %d-rank matrix on one host with its measurement time", out, err, tc.p)
			}
		})
		t.Run(tc.name+"/text", func(t *testing.T) {
			code, out, stderr := tc.run(t, append([]string{"bench", "--links"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			// One host: its local link in both directions, between its first two ranks.
			for _, want := range []string{"ranks on 1 host, measured in", "# host 0: ranks 0,1", "alpha (us)", "MB/s", "Gbit/s"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if rows := strings.Count(out, "\n") - 3; rows != 2 {
				t.Errorf("%d rows, want 2 (one host, both directions):\n%s", rows, out)
			}
		})
	}
	t.Run("the JSON is a --plan-links file", func(t *testing.T) {
		code, out, stderr := runCLI(t, "bench", "--links", "--format", "json", "--transport", "mem", "--np", "3")
		if code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
		}
		path := filepath.Join(t.TempDir(), "links.json")
		if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, stderr = runCLI(t, "bench", "--transport", "mem", "--np", "3", "--plan-links", path,
			"--collective", "auto", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "--settle", "0")
		if code != 0 || !strings.Contains(out, "predicted") {
			t.Fatalf("bench --plan-links on bench --links' output: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
	})
	t.Run("a collective's flag is refused, not ignored", func(t *testing.T) {
		for _, flag := range [][]string{{"--timeline", filepath.Join(t.TempDir(), "t.json")}, {"--collective", "ring"},
			{"-b", "1M"}, {"--plan-links", "measure"}, {"--segment", "64K"}} {
			code, _, stderr := runCLI(t, append([]string{"bench", "--links", "--transport", "mem", "--np", "2"}, flag...)...)
			if code != 2 || !strings.Contains(stderr, flag[0]+":") || !strings.Contains(stderr, "--links") {
				t.Errorf("bench --links %s: exit %d, stderr %q; want exit 2 naming the flag", strings.Join(flag, " "), code, stderr)
			}
		}
	})
	t.Run("bad format", func(t *testing.T) {
		code, _, stderr := runCLI(t, "bench", "--links", "--transport", "mem", "--np", "2", "--format", "tsv")
		if code == 0 || !strings.Contains(stderr, "--format") {
			t.Fatalf("exit %d, stderr %q; want a usage error naming --format", code, stderr)
		}
	})
}
