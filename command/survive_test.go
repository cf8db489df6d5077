package command

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/metrics"
)

// TestTrainStoppedHalfwayLeavesItsMetrics starts `hetsync train` as a subprocess, stops it
// halfway (Ctrl-C to the launching process, SIGKILL of one rank, SIGKILL of rank 0), and
// checks that the run directory holds what the ranks measured with a summary saying the run
// ended early, and that `hetsync report` reports on it and says so.
func TestTrainStoppedHalfwayLeavesItsMetrics(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 600, 100)
	for _, tc := range []struct {
		name   string
		stop   func(t *testing.T, train *exec.Cmd)
		reason string // in summary.json's ended_early.reason
	}{
		{"sigint", func(t *testing.T, c *exec.Cmd) { c.Process.Signal(syscall.SIGINT) }, "interrupted (interrupt signal received)"},
		{"sigkill-rank-1", func(t *testing.T, c *exec.Cmd) { syscall.Kill(rankPID(t, c.Process.Pid, 1), syscall.SIGKILL) }, "rank 1"},
		{"sigkill-rank-0", func(t *testing.T, c *exec.Cmd) { syscall.Kill(rankPID(t, c.Process.Pid, 0), syscall.SIGKILL) }, "rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := filepath.Join(dir, tc.name)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, hetsyncBinary(t), "train", "-np", "3", "--data", data, "--out", run,
				"--max-rounds", "100000", "--batch", "8", "--threads", "1", "--eval-every", "5", "--step-sleep", "5,5,5",
				"--security", "none", "--data-path", "tcp")
			cmd.Dir = dir
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// halfway: every rank has written 10 rounds of its own, and rank 0 an evaluation
			for r := 0; r < 4; {
				path := filepath.Join(run, metrics.EvalFile)
				want := 1
				if r < 3 {
					path, want = metrics.RankRecordsPath(run, r), 10
				}
				b, _ := os.ReadFile(path)
				if strings.Count(string(b), "\n") >= want {
					r++
					continue
				}
				if ctx.Err() != nil {
					t.Fatalf("the job did not reach 10 rounds on every rank and an evaluation in time (at %s)\nstderr:\n%s", path, errb.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			tc.stop(t, cmd)
			err := cmd.Wait()
			if ctx.Err() != nil || err == nil {
				t.Fatalf("train after the stop: %v (want a failure)\nstderr:\n%s", err, errb.String())
			}
			s, err := metrics.ReadSummary(run)
			if err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, errb.String())
			}
			if s.EndedEarly == nil || s.EndedEarly.Round < 9 || !strings.Contains(s.EndedEarly.Reason, tc.reason) {
				t.Fatalf("summary.json ended_early = %+v, want round ≥ 9 and a reason with %q\nstderr:\n%s", s.EndedEarly, tc.reason, errb.String())
			}
			t.Logf("%s", s.EndedEarly)
			if s.Ranks != 3 || s.Evaluations < 1 {
				t.Errorf("summary of %d ranks and %d evaluations, want 3 and at least one", s.Ranks, s.Evaluations)
			}
			code, rep, stderr := runBinary(t, "report", run, "--out", filepath.Join(dir, tc.name+"-report"))
			if code != 0 {
				t.Fatalf("report: exit %d: %s", code, stderr)
			}
			if want := "Run `" + tc.name + "` ended early at round " + strconv.Itoa(s.EndedEarly.Round); !strings.Contains(rep, want) {
				t.Errorf("report does not say %q:\n%s", want, rep)
			}
		})
	}
}

// rankPID finds the process of rank among the children of the launching process launcher.
func rankPID(t *testing.T, launcher, rank int) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its ')'
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(launcher) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if bytes.Contains(append([]byte{0}, env...), []byte("\x00HETSYNC_RANK="+strconv.Itoa(rank)+"\x00")) {
			return pid
		}
	}
	t.Fatalf("no process of rank %d under %d", rank, launcher)
	return 0
}

// When the launcher stopped the job (--timeout, a failed rank, Ctrl-C), its account replaces
// rank 0's "interrupted" one; when it stopped the job from outside (--timeout, Ctrl-C), also a
// failure rank 0 saw first (another rank giving up as it got the stop); after a rank failed
// first, a rank 0 that failed for its own reason keeps it; a run rank 0 never closed gets the
// launcher's account.
func TestCloseFailedRun(t *testing.T) {
	timedOut := &launcher.TimedOut{Timeout: 30 * time.Second, Running: []int{0, 1}, Hosts: []string{"", ""}}
	ctrlC := &launcher.Interrupted{Cause: errors.New("interrupt signal received"), Stopped: 2}
	rank1 := &launcher.RankFailure{Rank: 1, Exit: launcher.Exit{Code: 1}, Stopped: 1}
	echo := "trainer: rank 0: allreduce #21 (ring): rank 1 gave up on call #21 and told rank 0 to stop waiting"
	for _, tc := range []struct {
		name, rank0 string // rank0: the reason rank 0 wrote ("" wrote no summary)
		cause       error  // the launcher's
		want        string
	}{
		{"interrupted by the launcher", metrics.Interrupted + "terminated signal received", timedOut, "job ran longer than --timeout 30s"},
		{"a timeout's echo", echo, timedOut, "job ran longer than --timeout 30s"},
		{"a Ctrl-C's echo", echo, ctrlC, "interrupted (interrupt signal received)"},
		{"rank 0's own failure", "trainer: rank 0: send to rank 1: broken pipe", rank1, "trainer: rank 0: send to rank 1: broken pipe"},
		{"no summary", "", timedOut, "job ran longer than --timeout 30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := metrics.CreateRunDir(dir, map[string]any{"ranks": 2})
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
			for r := range 2 {
				rr, err := metrics.OpenRankRecords(dir, r)
				if err != nil {
					t.Fatal(err)
				}
				rr.WriteRound(&metrics.RoundRecord{Rank: r, Round: 0, TimeS: 1, LateRank: -1})
				rr.Close()
			}
			if tc.rank0 != "" {
				if _, err := metrics.EndEarly(dir, tc.rank0); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			closeFailedRun(&out, "hetsync train", dir, tc.cause)
			s, err := metrics.ReadSummary(dir)
			if err != nil || s.EndedEarly == nil || !strings.HasPrefix(s.EndedEarly.Reason, tc.want) {
				t.Fatalf("summary %+v, %v; want a reason beginning %q", s.EndedEarly, err, tc.want)
			}
			if !strings.Contains(out.String(), "ended early at round 0 ("+tc.want) {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}
