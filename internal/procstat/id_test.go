package procstat

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestProcState asks the kernel about a child as it runs, is stopped, continues and exits, and
// about a ID whose start time is another process's (a reused PID).
func TestProcState(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here:", err) // not Linux
	}
	self := Self()
	if self.PID != os.Getpid() || self.PIDNS == "" || self.State() != StateRunning {
		t.Fatalf("Self() = %+v, state %v: want this running process", self, self.State())
	}
	if reused := (ID{PID: self.PID, PIDNS: self.PIDNS, Start: self.Start + 1}); reused.State() != StateGone {
		t.Errorf("a PID with another start time reads %v, want %v", reused.State(), StateGone)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	_, start, err := Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	child := ID{PID: cmd.Process.Pid, PIDNS: self.PIDNS, Start: start}
	waitState := func(want State) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for child.State() != want {
			if time.Now().After(deadline) {
				t.Fatalf("child reads %v, want %v", child.State(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitState(StateRunning)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(StateStopped)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(StateRunning)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitState(StateGone) // a zombie until reaped: gone already
	_ = cmd.Wait()
	waitState(StateGone)
	if !Watchable(self, child, true) || Watchable(self, child, false) || Watchable(self, ID{PID: 1, PIDNS: "pid:[1]"}, true) || Watchable(self, self, true) {
		t.Error("Watchable: want another process of this kernel and PID namespace only")
	}
}
