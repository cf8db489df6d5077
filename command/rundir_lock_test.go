package command

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
)

// TestRunDirOwnedByOneJob: while one `hetsync train` job trains into a run directory, a second
// job given the same --out and a --resume of it are refused before any rank starts (exit 2),
// naming the directory and the first job's pid, and write nothing into it: the first job's run
// ends with its own account, not the refused jobs'.
func TestRunDirOwnedByOneJob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"train", "-np", "2", "--sync", "ssgd", "--collective", "ring", "--eval-every", "1000", "--max-rounds", "1000000"}
	if data := os.Getenv("HETSYNC_DATA"); data != "" {
		args = append(args, "--data", data)
	}
	first := exec.Command(hetsyncBinary(t), append(args, "--out", dir, "--checkpoint-every", "2")...)
	first.Dir = t.TempDir()
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- first.Wait() }()
	defer func() {
		_ = first.Process.Kill()
		<-ended
	}()
	// The first job trains once it has written a checkpoint: its run directory is its own.
	for trainer.HasCheckpoint(dir) != nil {
		select {
		case err := <-ended:
			t.Fatalf("the first job ended (%v) before its first checkpoint:\n%s", err, firstOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	entries := func() []string {
		var names []string
		_ = filepath.WalkDir(dir, func(path string, _ os.DirEntry, _ error) error {
			names = append(names, path)
			return nil
		})
		return names
	}
	before := entries()
	holder := fmt.Sprintf("pid %d holds", first.Process.Pid)
	for _, extra := range [][]string{{"--out", dir}, {"--resume", dir}} {
		code, out, stderr := runBinary(t, append(args[:len(args):len(args)], extra...)...)
		if code != 2 || !strings.Contains(stderr, strings.Join(extra, " ")+": the run directory is in use") || !strings.Contains(stderr, holder) {
			t.Errorf("%v: exit %d; want exit 2 and an error naming %s and %q\nstdout:\n%s\nstderr:\n%s", extra, code, dir, holder, out, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, metrics.SummaryFile)); err == nil {
		t.Errorf("a refused job wrote %s into the running job's directory", metrics.SummaryFile)
	}
	for _, name := range entries() {
		if !strings.Contains(strings.Join(before, "\n")+"\n", name+"\n") && !strings.Contains(name, "checkpoint") && !strings.HasPrefix(filepath.Base(name), ".") {
			t.Errorf("%s appeared while the second jobs were refused", name)
		}
	}
	// The first job, stopped, tells its own end.
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ended
	ended <- nil // for the deferred clean-up
	s, err := metrics.ReadSummary(dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, firstOut.String())
	}
	if s.EndedEarly == nil || strings.Contains(s.EndedEarly.Reason, "in use") || strings.Contains(s.EndedEarly.Reason, "already holds") {
		t.Errorf("the stopped job's summary says it ended early with %v; want its own stop", s.EndedEarly)
	}
}
