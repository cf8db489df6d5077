package p2p

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestProcState asks the kernel about a child as it runs, is stopped, continues and exits, and
// about a procID whose start time is another process's (a reused PID).
func TestProcState(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here:", err) // not Linux
	}
	self := selfProc()
	if self.PID != os.Getpid() || self.PIDNS == "" || self.state() != procRunning {
		t.Fatalf("selfProc() = %+v, state %v: want this running process", self, self.state())
	}
	if reused := (procID{PID: self.PID, PIDNS: self.PIDNS, Start: self.Start + 1}); reused.state() != procGone {
		t.Errorf("a PID with another start time reads %v, want %v", reused.state(), procGone)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	_, start, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	child := procID{PID: cmd.Process.Pid, PIDNS: self.PIDNS, Start: start}
	waitState := func(want procState) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for child.state() != want {
			if time.Now().After(deadline) {
				t.Fatalf("child reads %v, want %v", child.state(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitState(procRunning)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(procStopped)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(procRunning)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitState(procGone) // a zombie until reaped: gone already
	_ = cmd.Wait()
	waitState(procGone)
	if !watchable(self, child, true) || watchable(self, child, false) || watchable(self, procID{PID: 1, PIDNS: "pid:[1]"}, true) || watchable(self, self, true) {
		t.Error("watchable: want another process of this kernel and PID namespace only")
	}
}
