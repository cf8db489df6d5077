package procstat

import (
	"errors"
	"io/fs"
	"os"
)

// ID names a process on one kernel: its PID, its PID namespace and its start time (clock
// ticks after boot), so that a PID reused by another process is not taken for the rank.
type ID struct {
	PID   int    `json:"pid,omitempty"`
	PIDNS string `json:"pidns,omitempty"` // the target of /proc/self/ns/pid
	Start uint64 `json:"start,omitempty"` // /proc/PID/stat field 22
}

const pidNSLink = "/proc/self/ns/pid"

// Self is this process's ID; the zero value when /proc cannot tell (the monitor then
// judges this rank's silence by heartbeats alone).
func Self() ID {
	ns, err := os.Readlink(pidNSLink)
	if err != nil {
		return ID{}
	}
	pid := os.Getpid()
	_, start, err := Read(pid)
	if err != nil {
		return ID{}
	}
	return ID{PID: pid, PIDNS: ns, Start: start}
}

// State is what the kernel says of a process.
type State int

const (
	StateUnknown State = iota // not Watchable from here: judge by heartbeats alone
	StateRunning              // running, runnable or sleeping: alive
	StateStopped              // stopped by a signal or a tracer: frozen
	StateGone                 // exited (or a zombie), or its PID now belongs to another process
)

func (s State) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateStopped:
		return "stopped (SIGSTOP or a tracer)"
	case StateGone:
		return "exited"
	}
	return "unknown"
}

// Watchable says whether this rank can ask the kernel about peer p: both publish their
// process, they share a kernel (kernel: p's host proof was read) and a PID namespace, and p
// runs in another process (of ranks in one process the kernel knows nothing apart).
func Watchable(me, p ID, kernel bool) bool {
	return kernel && me.PID > 0 && p.PID > 0 && p.PID != me.PID && me.PIDNS != "" && me.PIDNS == p.PIDNS
}

// State asks the kernel about p.
func (p ID) State() State {
	if p.PID <= 0 {
		return StateUnknown
	}
	st, start, err := Read(p.PID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return StateGone
	case err != nil:
		return StateUnknown
	case start != p.Start:
		return StateGone
	}
	if Stopped(st) {
		return StateStopped
	}
	switch st {
	case 'Z', 'X', 'x':
		return StateGone
	}
	return StateRunning
}
