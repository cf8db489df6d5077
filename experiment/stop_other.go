//go:build !unix

package experiment

import (
	"os"
	"os/exec"
	"time"
)

// setStopGroup interrupts the run when it is cancelled and kills it after grace.
func setStopGroup(cmd *exec.Cmd, grace time.Duration) {
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = grace
}

// killGroup kills a cancelled run.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
