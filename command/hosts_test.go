package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostFlagErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-hostfile")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"launch", "-H", "a:2", "--hostfile", missing, "true"}, "-H and --hostfile: give one of them"},
		{[]string{"launch", "-H", "a:0", "true"}, `-H "a:0": host "a:0": slots "0"`},
		{[]string{"launch", "--hostfile", missing, "true"}, "--hostfile: open " + missing},
		{[]string{"launch", "-np", "3", "-H", "a:1,b:1", "true"}, "-np 3: more ranks than the 2 slots of 2 host(s) (a:1,b:1)"},
		{[]string{"launch", "-np", "-1", "-H", "a:1", "true"}, "--np -1"},
		{[]string{"launch", "-np", "1", "-x", "=v", "true"}, `-x "=v": want VAR or VAR=value`},
		{[]string{"launch", "-np", "1", "-x", "HETSYNC_TEST_SURELY_UNSET", "true"}, "-x HETSYNC_TEST_SURELY_UNSET: the variable is not set here"},
		{[]string{"launch", "-np", "1", "--timeout", "-1s", "true"}, "--timeout -1s"},
		{[]string{"launch", "-np", "1", "--iface", "no-such-if0", "true"}, `--iface: interface "no-such-if0"`},
		{[]string{"launch", "-H", "a:1", "--ssh-port", "70000", "true"}, "--ssh-port 70000"},
		{[]string{"launch", "-H", "a:1", "-x", "1BAD=x", "true"}, `-x "1BAD": not a variable name`},
		{[]string{"launch", "-H", "a:1", "--ssh-insecure-skip-hostkey", "--ssh-known-hosts", missing, "true"}, "contradict"},
		{[]string{"bench", "-H", "a:1"}, "--np: required"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

func TestLaunchOnLocalhostHostsWithForwardedVariables(t *testing.T) {
	// "localhost" in a host list starts ranks here, without SSH; -x sets variables.
	dir := t.TempDir()
	t.Setenv("HETSYNC_TEST_FWD", "from the launcher")
	code, out, stderr := runCLI(t, "launch", "-H", "localhost:3", "-x", "HETSYNC_TEST_SET=set here", "-x", "HETSYNC_TEST_FWD",
		"--output-dir", dir, "--", "sh", "-c", `echo "$HETSYNC_RANK $HETSYNC_LOCAL_RANK/$HETSYNC_LOCAL_SIZE $HETSYNC_HOSTNAME $HETSYNC_TEST_SET; $HETSYNC_TEST_FWD"`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for r := 0; r < 3; r++ {
		line := fmt.Sprintf("%d %d/3 localhost set here; from the launcher", r, r)
		if !strings.Contains(out, fmt.Sprintf("[%d] %s\n", r, line)) {
			t.Errorf("rank %d: no line %q in\n%s", r, line, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank.%d.log", r)))
		if err != nil || string(b) != line+"\n" {
			t.Errorf("rank %d log: %q, %v; want %q", r, b, err, line)
		}
	}
}
