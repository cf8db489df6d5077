package command

import (
	"strings"
	"testing"

	"github.com/hetsync/hetsync/launcher"
)

// TestPlanLinksFlag: --plan-links reaches the launched ranks as HETSYNC_LINKS, a file is read
// by bench itself, and what cannot work is refused before anything starts.
func TestPlanLinksFlag(t *testing.T) {
	tests := []struct {
		transport, plan string
		file            string // linksFile
		mayMeasure      bool
		err             string
	}{
		{"p2p", "", "", true, ""},
		{"p2p", "off", "", false, ""},
		{"p2p", "measure", "", true, ""},
		{"p2p", "/x/links.json", "/x/links.json", false, ""},
		{"mem", "", "", false, ""},
		{"mem", "links.json", "links.json", false, ""},
		{"mem", "measure", "", true, "--transport mem"},
	}
	for _, tc := range tests {
		n := netOptions{Transport: tc.transport, DataPath: "auto", Security: "tls", PlanLinks: tc.plan}
		err := n.validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s --plan-links %q: error %v, want %q", tc.transport, tc.plan, err, tc.err)
		}
		if got := n.linksFile(); got != tc.file {
			t.Errorf("%s --plan-links %q: file %q, want %q", tc.transport, tc.plan, got, tc.file)
		}
		if got := n.mayMeasure(); got != tc.mayMeasure {
			t.Errorf("%s --plan-links %q: may measure %v, want %v", tc.transport, tc.plan, got, tc.mayMeasure)
		}
		env := map[string]string{}
		for _, kv := range n.settings().Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if env[launcher.EnvLinks] != tc.plan {
			t.Errorf("--plan-links %q: exported %s=%q", tc.plan, launcher.EnvLinks, env[launcher.EnvLinks])
		}
	}
}
