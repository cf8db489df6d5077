package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/internal/schedpolicy"
)

// A scheduling policy that is neither batch nor inherit is a usage error naming the flag or
// the variable it came from, on every command that takes it.
func TestSchedErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"bench", "--np", "2", "--sched", "rr"}, "", `--sched "rr": unknown scheduling policy (known: batch, inherit)`},
		{[]string{"train", "--np", "2", "--sched", "fifo"}, "", `--sched "fifo": unknown`},
		{[]string{"launch", "--np", "2", "--sched", "normal", "true"}, "", `--sched "normal": unknown`},
		{[]string{"bench", "--np", "2"}, "idle", `HETSYNC_SCHED "idle": unknown`},
		{[]string{"launch", "--np", "2", "true"}, "Batch", `HETSYNC_SCHED "Batch": unknown`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " ")+" "+tc.env, func(t *testing.T) {
			t.Setenv("HETSYNC_SCHED", tc.env)
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// wantSched is the policy a rank started by this test reports for --sched policy: batch
// replaces only the default policy, so a test run under chrt keeps its own.
func wantSched(t *testing.T, policy string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		return string(schedpolicy.Inherit)
	}
	own, err := schedpolicy.ThreadPolicies(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	p := own[os.Getpid()]
	if policy == "batch" && (p == "normal" || p == "batch") {
		return "batch"
	}
	return p
}

// The benchmark's table and a training run's config.json say which policy rank 0's threads
// ran under, for the flag, the variable a launcher exports and the default.
func TestSchedRecorded(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	tests := []struct {
		name   string
		args   []string
		env    string
		policy string
	}{
		{"default", nil, "", "inherit"},
		{"flag inherit", []string{"--sched", "inherit"}, "", "inherit"},
		{"variable inherit", nil, "inherit", "inherit"},
		{"flag wins", []string{"--sched", "batch"}, "inherit", "batch"},
	}
	net := []string{"--np", "2", "--data-path", "tcp", "--security", "none"}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HETSYNC_SCHED", tc.env)
			want := "sched=" + wantSched(t, tc.policy)
			args := append(append([]string{"bench", "-b", "4K", "-e", "4K", "-n", "1", "-w", "1", "--settle", "0"}, net...), tc.args...)
			code, out, stderr := runBinary(t, args...)
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("bench: exit %d; want the table to note %s\nstdout:\n%s\nstderr:\n%s", code, want, out, stderr)
			}
			run := filepath.Join(dir, "run"+string(rune('0'+i)))
			args = append(append([]string{"train", "--data", data, "--max-rounds", "2", "--batch", "16", "--threads", "1", "--out", run}, net...), tc.args...)
			if code, _, stderr := runBinary(t, args...); code != 0 {
				t.Fatalf("train: exit %d: %s", code, stderr)
			}
			b, err := os.ReadFile(filepath.Join(run, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Sched string `json:"sched"`
			}
			if err := json.Unmarshal(b, &cfg); err != nil || "sched="+cfg.Sched != want {
				t.Errorf("train: config.json sched %q (%v), want %s", cfg.Sched, err, want)
			}
		})
	}
}
