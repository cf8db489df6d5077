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
	b, _ := io.ReadAll(io.LimitReader(f, 32))
	pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, true
}
