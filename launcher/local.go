//go:build unix

package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hetsync/hetsync/internal/procstat"
)

// LocalSpawner starts ranks as child processes of this one, each in its own process group, so
// that stopping a rank also stops whatever the rank started, and whatever a rank leaves running
// in its group when it exits is killed. On Linux a rank is also killed when the launcher dies
// without cleaning up.
type LocalSpawner struct {
	// OutputGrace bounds how long Wait waits for output pipes that a rank's leftover children
	// still hold open after the rank exited; 0 means 2 s.
	OutputGrace time.Duration
}

// Spawn starts one rank.
func (s LocalSpawner) Spawn(ctx context.Context, spec ProcSpec) (Process, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("rank %d: empty command", spec.Rank)
	}
	path, err := lookPathIn(spec.Argv[0], spec.Env)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", spec.Rank, err)
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        spec.Argv,
		Env:         spec.Env,
		Dir:         spec.Dir,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		SysProcAttr: sysProcAttr(),
		WaitDelay:   s.OutputGrace,
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rank %d: start %s: %w", spec.Rank, spec.Argv[0], err)
	}
	return &localProc{cmd: cmd, pgid: cmd.Process.Pid}, nil
}

// lookPathIn finds the program file as execvp would in a process with environment env: a name
// without a slash is looked up in env's PATH (the last one, as exec.Cmd keeps), so that a rank
// launched with -x PATH=... runs the program that PATH names. Relative PATH entries are
// skipped, as exec.LookPath refuses them. Without PATH in env, this process's PATH is used.
func lookPathIn(file string, env []string) (string, error) {
	pathList, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathList, found = v, true
		}
	}
	if strings.Contains(file, "/") || !found {
		return exec.LookPath(file)
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

type localProc struct {
	cmd  *exec.Cmd
	pgid int
}

func (p *localProc) Wait() Exit {
	e := p.wait()
	e.At = time.Now()
	return e
}

func (p *localProc) wait() Exit {
	err := p.cmd.Wait()
	// Whatever the rank left behind in its process group (background children) goes with it:
	// a job leaves no orphans. The group id cannot have been reused while members remain.
	_ = p.signal(syscall.SIGKILL)
	st := p.cmd.ProcessState
	if st == nil {
		return Exit{Code: -1, Err: err}
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	if err != nil && !errors.As(err, new(*exec.ExitError)) && !errors.Is(err, exec.ErrWaitDelay) {
		return Exit{Code: st.ExitCode(), Err: err}
	}
	return Exit{Code: st.ExitCode()}
}

func (p *localProc) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the whole group is gone already
	}
	return err
}

// Terminate sends SIGTERM, then SIGCONT: a stopped process (SIGSTOP, Ctrl-Z) cannot act on
// SIGTERM until it is continued, and would otherwise sit out the whole grace period only to
// be killed. To a running process SIGCONT means nothing.
func (p *localProc) Terminate() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	return p.signal(syscall.SIGCONT)
}

// Stopped says whether the rank's process is stopped (launcher.Freezable).
func (p *localProc) Stopped() bool {
	st, _, err := procstat.Read(p.cmd.Process.Pid)
	return err == nil && procstat.Stopped(st)
}
func (p *localProc) Kill() error { return p.signal(syscall.SIGKILL) }
