package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hetsync/hetsync/metrics"
)

// runLock is a job's hold on its run directory: an exclusive flock(2) on the directory's
// metrics.LockFile, which holds the holder's pid. The kernel drops the lock when the holder's
// file closes, the holder's exit included, so a killed job never leaves its directory locked;
// the file itself stays (removing it would let a third job lock a new file while a second
// still holds the old one).
type runLock struct{ f *os.File }

// lockRunDir takes dir's lock for this process, or fails at once naming flag, dir and the
// pid that holds it. Two jobs given one run directory would otherwise both write into it:
// every round recorded twice, or the refused job's "ended early" written into the other's
// run. A lock held by this process's parent is the launching hetsync train's, which holds it
// for the whole job on its rank 0's behalf: that is no conflict, and nil is returned.
func lockRunDir(flag, dir string) (*runLock, error) {
	path := filepath.Join(dir, metrics.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s %s: cannot open the run directory's lock: %w", flag, dir, err)
	}
	if locked, err := tryLock(f, flag, dir); !locked {
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: writing the run directory's lock: %w", flag, dir, err)
	}
	return &runLock{f}, nil
}

// checkNotHeld fails, as lockRunDir would, when another job holds dir's lock, without
// taking it and without writing anything into dir.
func checkNotHeld(flag, dir string) error {
	if pid, held := metrics.LockHolder(dir); held && pid != os.Getppid() {
		return inUse(flag, dir, pid)
	}
	return nil
}

// inUse is the error of a job refused dir, whose lock pid holds (0: not known).
func inUse(flag, dir string, pid int) error {
	who := "it"
	if pid > 0 {
		who = "pid " + strconv.Itoa(pid)
	}
	return fmt.Errorf("%s %s: the run directory is in use by another hetsync job (%s holds %s); wait for it to end, or choose another directory",
		flag, dir, who, filepath.Join(dir, metrics.LockFile))
}

// tryLock takes the lock on f, the run directory dir's lock file, without waiting. A lock
// another job holds is an error naming it. Unless it reports locked, f is closed: a lock
// held by this process's parent (see lockRunDir) is not locked and no error.
func tryLock(f *os.File, flag, dir string) (locked bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return true, nil
	}
	holder := metrics.LockPID(f)
	path := f.Name()
	f.Close()
	switch {
	case !errors.Is(err, syscall.EWOULDBLOCK):
		return false, fmt.Errorf("%s %s: cannot lock %s: %w", flag, dir, path, err)
	case holder == os.Getppid():
		return false, nil
	}
	return false, inUse(flag, dir, holder)
}

// Close releases the lock; a nil lock (held by the parent) is a no-op.
func (l *runLock) Close() {
	if l != nil {
		l.f.Close()
	}
}
