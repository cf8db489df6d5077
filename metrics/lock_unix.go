//go:build unix

package metrics

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockHolder reports whether a job holds the run directory dir's LockFile now, and the pid
// written in it (0 when none is, or not yet). It only tries the lock, never keeps it, and
// writes nothing.
func LockHolder(dir string) (pid int, held bool) {
	f, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		return 0, false
	}
	defer f.Close() // a shared lock taken here goes with it
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		return 0, false
	}
	return LockPID(f), true
}

// LockPID is the pid a LockFile's holder wrote in it, read from r; 0 when none is (yet).
func LockPID(r io.Reader) int {
	b, _ := io.ReadAll(io.LimitReader(r, 32))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}
