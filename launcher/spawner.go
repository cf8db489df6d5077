package launcher

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"
)

// ProcSpec is everything a Spawner needs to start one rank.
type ProcSpec struct {
	Rank int
	// Argv is the command and its arguments; Argv[0], without a slash, is looked up in the
	// PATH of Env.
	Argv []string
	// Env is the complete environment of the process ("KEY=value").
	Env []string
	// Dir is the working directory; empty means the launcher's.
	Dir string
	// Stdout and Stderr receive the process's output.
	Stdout, Stderr io.Writer
}

// Spawner starts rank processes. LocalSpawner starts them on this machine; an SSH spawner
// starts them on other hosts.
type Spawner interface {
	Spawn(ctx context.Context, spec ProcSpec) (Process, error)
}

// Process is a started rank.
type Process interface {
	// Wait blocks until the process has exited and its output has been delivered, and says
	// how it ended. It is called exactly once.
	Wait() Exit
	// Terminate asks the process and everything it started to stop (SIGTERM to its process
	// group, and SIGCONT, so that a stopped process can act on it). It is safe to call after
	// the process has exited.
	Terminate() error
	// Kill stops the process and everything it started at once (SIGKILL to its process group).
	Kill() error
}

// Freezable is implemented by processes whose state the launcher can read (ranks on this
// machine; ranks on other hosts do not implement it). Stopped says whether the process is
// stopped (SIGSTOP, Ctrl-Z, a tracer): it runs no code, so its peers hear nothing from it.
type Freezable interface {
	Stopped() bool
}

// Exit says how a rank process ended.
type Exit struct {
	// Code is the exit status, or -1 when the process was killed by a signal or never ran.
	Code int
	// Signal is the signal that killed the process, or 0.
	Signal syscall.Signal
	// Err is set when the process's state could not be determined (e.g. waiting failed).
	Err error
	// At is when the launcher learnt that the process ended (zero: Job.Run stamps it when
	// Wait returns).
	At time.Time
}

// Success reports whether the process exited with status 0.
func (e Exit) Success() bool { return e.Err == nil && e.Signal == 0 && e.Code == 0 }

func (e Exit) String() string {
	switch {
	case e.Err != nil:
		return e.Err.Error()
	case e.Signal != 0:
		return fmt.Sprintf("killed by signal %d (%v)", int(e.Signal), e.Signal)
	default:
		return fmt.Sprintf("exit status %d", e.Code)
	}
}

// ExitCode is the status a launcher exits with to pass this exit on: the rank's own status, or
// 128+signal as a shell does.
func (e Exit) ExitCode() int {
	switch {
	case e.Err != nil:
		return 1
	case e.Signal != 0:
		return 128 + int(e.Signal)
	case e.Code > 0 && e.Code < 256:
		return e.Code
	case e.Code == 0:
		return 0
	default:
		return 1
	}
}
