//go:build unix

package experiment

import (
	"os/exec"
	"syscall"
	"time"
)

// setStopGroup starts cmd in its own process group and makes cancelling it send SIGTERM to
// the whole group: `hetsync train` over p2p has rank processes of its own, and they must
// not outlive a run that timed out. After grace, the leader is killed.
func setStopGroup(cmd *exec.Cmd, grace time.Duration) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = grace
}

// killGroup kills what is left of a cancelled run's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
