package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/metrics"
)

// TestLaunchOut: launch --out hands every rank the run directory (HETSYNC_RUN_DIR) that a
// program's session writes, refuses one that already holds a run, or a job that would restart
// into it, and gives the run of a job that failed a summary.json saying so, as train does.
func TestLaunchOut(t *testing.T) {
	t.Run("failed job", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		// Rank 0 starts the run and records a round as a session would, then fails; rank 1
		// waits to be stopped.
		prog := `[ "$HETSYNC_RUN_DIR" = "$1" ] || exit 9; [ "$HETSYNC_RANK" = 0 ] || exec sleep 600
			echo '{"ranks":2}' > "$1/config.json" && mkdir "$1/ranks" &&
			echo '{"rank":0,"round":0,"time_s":1,"late_rank":-1}' > "$1/ranks/rank-0.jsonl" && exit 3`
		code, _, stderr := runCLI(t, "launch", "-np", "2", "--out", dir, "--", "sh", "-c", prog, "sh", dir)
		if code == 0 || !strings.Contains(stderr, "exit status 3") {
			t.Fatalf("exit %d, want the ranks' failure (status 3); stderr:\n%s", code, stderr)
		}
		s, err := metrics.ReadSummary(dir)
		if err != nil || s.EndedEarly == nil || !strings.Contains(s.EndedEarly.Reason, "exit status 3") {
			t.Fatalf("summary.json: %+v, %v; want a run that ended early with the ranks' failure", s.EndedEarly, err)
		}
		if !strings.Contains(stderr, "hetsync launch: run "+dir+" ended early") {
			t.Errorf("stderr does not say where the run ended:\n%s", stderr)
		}
	})
	t.Run("refused", func(t *testing.T) {
		held := t.TempDir()
		if err := os.WriteFile(filepath.Join(held, metrics.ConfigFile), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--out", held}, "--out " + held + ": already holds a run"},
			{[]string{"--out", filepath.Join(t.TempDir(), "new"), "--max-restarts", "1"}, "--out and --max-restarts"},
		} {
			args := append(append([]string{"launch", "-np", "1"}, tc.args...), "--", "true")
			code, _, stderr := runCLI(t, args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, code, stderr, tc.want)
			}
		}
	})
}
