// Package procstat reads what the Linux kernel says of a process in /proc/PID/stat: its state
// letter (R, S, D, T, t, Z, X...) and its start time, and names a process on one kernel (ID:
// its PID, PID namespace and start time) with what the kernel says of it (State). The p2p
// transport asks it about its same-host peers and the launcher about its children, so that a
// stopped (SIGSTOP) or exited process is named as such instead of being taken for a slow one.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Read returns the state letter and the start time (clock ticks after boot, field 22) of
// process pid. Where there is no /proc (not Linux) the error wraps fs.ErrNotExist, as for a
// process that is gone.
func Read(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	return Parse(b)
}

// Parse reads a /proc/PID/stat line: "pid (comm) state ppid ..." where comm may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func Parse(b []byte) (state byte, start uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc stat line %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("malformed /proc stat line %q", b)
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed start time in /proc stat line %q: %w", b, err)
	}
	return f[0][0], start, nil
}

// Stopped says whether a state letter is a stopped process: by a signal (T) or by a tracer (t).
// A stopped process runs no code, so it neither answers its peers nor handles SIGTERM until
// it is continued.
func Stopped(state byte) bool { return state == 'T' || state == 't' }
