package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/procstat"
)

// blameDirEnv names the directory where the blame helpers leave and find their signals.
const blameDirEnv = "LAUNCHER_TEST_BLAME_DIR"

// blameHelper is a rank of the blame tests. leave-early: rank 1 exits 0 at once and rank 0
// fails once the test says rank 1 is gone (file "go"). freeze: rank 1 stops itself (SIGSTOP)
// after writing its pid, and rank 0 fails once the kernel says rank 1 is stopped, as a peer
// whose heartbeats stopped would.
func blameHelper(mode string, rank int) int {
	dir := os.Getenv(blameDirEnv)
	pidFile := filepath.Join(dir, "pid")
	switch {
	case mode == "leave-early" && rank == 1:
		return 0
	case mode == "leave-early":
		for !exists(filepath.Join(dir, "go")) {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Println("rank 0: peer rank 1 is gone")
		return 1
	case mode == "freeze" && rank == 1:
		if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return 2
		}
		if err := os.Rename(pidFile+".tmp", pidFile); err != nil {
			return 2
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Hour)
		return 0
	default:
		for {
			b, err := os.ReadFile(pidFile)
			if err == nil {
				pid, _ := strconv.Atoi(string(b))
				if st, _, err := procstat.Read(pid); err == nil && procstat.Stopped(st) {
					fmt.Println("rank 0: rank 1 is unresponsive")
					return 1
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// withoutTime is e without its time, to compare with a literal.
func withoutTime(e Exit) Exit {
	e.At = time.Time{}
	return e
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// exitSpawner is LocalSpawner that calls exited with a rank's number once its Wait has
// returned (the launcher has stamped the exit).
type exitSpawner struct {
	LocalSpawner
	exited func(rank int)
}

type exitProc struct {
	Process
	rank   int
	exited func(rank int)
}

func (s exitSpawner) Spawn(ctx context.Context, spec ProcSpec) (Process, error) {
	p, err := s.LocalSpawner.Spawn(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &exitProc{p, spec.Rank, s.exited}, nil
}

func (p *exitProc) Wait() Exit {
	e := p.Process.Wait()
	p.exited(p.rank)
	return e
}

// blameJob is a job of np blame helpers in mode, with their directory and the launcher's log.
func blameJob(t *testing.T, np int, mode string) (*Job, string, *syncBuffer) {
	dir := t.TempDir()
	logb := newSyncBuffer("", 0)
	job := helperJob(t, np, mode, newSyncBuffer("", 0), newSyncBuffer("", 0))
	job.Env = append(job.Env, blameDirEnv+"="+dir)
	job.Log = logb
	return job, dir, logb
}

// A rank that exits 0 while the others still run, and whose peer then fails for want of it, is
// named by the launcher with the time it left: rank 0 failing first is not the story.
func TestJobNamesRankThatLeftEarly(t *testing.T) {
	job, dir, _ := blameJob(t, 2, "leave-early")
	job.Spawner = exitSpawner{exited: func(rank int) {
		if rank == 1 {
			_ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
		}
	}}
	err := job.Run(context.Background())
	var f *RankFailure
	if !errors.As(err, &f) || f.Rank != 0 {
		t.Fatalf("Run = %v, want rank 0's *RankFailure", err)
	}
	if len(f.Left) != 1 || f.Left[0].Rank != 1 || !f.Left[0].At.Before(f.Exit.At) {
		t.Fatalf("Left = %+v (rank 0 failed at %v), want rank 1 before the failure", f.Left, f.Exit.At)
	}
	want := "rank 1 exited with status 0 at " + f.Left[0].At.Format("15:04:05.000")
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "while the other ranks were still in it; rank 0 failed first: exit status 1") {
		t.Errorf("error %q, want it to start with %q and name rank 0's failure after", err, want)
	}
}

// A stopped (SIGSTOP) rank is named when a peer fails for want of it, and is stopped at once
// (SIGTERM and SIGCONT), not after a grace period it cannot use.
func TestJobNamesAndStopsFrozenRank(t *testing.T) {
	job, _, logb := blameJob(t, 3, "freeze")
	job.Grace = time.Minute // a stopped rank that waited for it would show "sending SIGKILL"
	err := job.Run(context.Background())
	var f *RankFailure
	if !errors.As(err, &f) || f.Rank == 1 {
		t.Fatalf("Run = %v, want the *RankFailure of rank 0 or 2", err)
	}
	if !slices.Equal(f.Frozen, []int{1}) || !strings.HasPrefix(err.Error(), "rank(s) 1 stopped (SIGSTOP or a tracer)") {
		t.Errorf("Frozen = %v, error %q: want rank 1 named as stopped first", f.Frozen, err)
	}
	if strings.Contains(logb.String(), "SIGKILL") {
		t.Errorf("the stopped rank waited out the grace period:\n%s", logb.String())
	}
}

// KillAtOnce (launch --grace 0) kills ranks without SIGTERM or a grace period: a rank that
// ignores SIGTERM is gone without the launcher waiting for it.
func TestJobKillAtOnce(t *testing.T) {
	out := newSyncBuffer("ready", 2)
	logb := newSyncBuffer("", 0)
	job := helperJob(t, 2, "ignore-term", out, newSyncBuffer("", 0))
	job.Grace, job.KillAtOnce, job.Log = 0, true, logb
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-out.ready; cancel() }()
	if err := job.Run(ctx); !errors.As(err, new(*Interrupted)) {
		t.Fatalf("Run = %v, want *Interrupted", err)
	}
	if strings.Contains(logb.String(), "after SIGTERM") {
		t.Errorf("the launcher waited for a grace period:\n%s", logb.String())
	}
	if err := (&Job{NP: 1, Command: []string{"true"}, Grace: time.Second, KillAtOnce: true}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "grace period 1s given with KillAtOnce") {
		t.Errorf("Validate of a grace with KillAtOnce = %v", err)
	}
}
