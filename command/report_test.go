package command

import (
	"path/filepath"
	"strings"
	"testing"
)

// A run directory that is not there is bad usage (exit 2, as the README says), named.
func TestReportMissingRunDirIsUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-run")
	code, _, stderr := runCLI(t, "report", "--out", filepath.Join(t.TempDir(), "rep"), missing)
	if code != 2 || !strings.Contains(stderr, missing+" is not a run directory") {
		t.Errorf("exit %d, stderr %q; want exit 2 naming %s", code, stderr, missing)
	}
}
