//go:build linux

package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SweepStale removes the segment and arena files in dir (DefaultDir when "") that a process
// killed before it could unlink them left behind, and returns their paths. A file is stale
// when it is a segment or an arena by name, belongs to this process's user, was last modified at least minAge
// ago, and no process holds its lock: a live creator holds a shared flock on its file (see
// HoldLock), and the kernel drops the lock when the process dies. So a live job's segment is
// never removed, whoever runs the sweep. minAge covers the moment between a creator's open
// and its lock.
func SweepStale(dir string, minAge time.Duration) ([]string, error) {
	return SweepUnheld(dir, minAge, func(name string) bool { return validName(name, namePrefix) || validName(name, arenaPrefix) })
}

// SweepUnheld is SweepStale for any files whose live owners hold them with HoldLock: those in
// dir (DefaultDir when "") whose names match, that belong to this process's user, were last
// modified at least minAge ago and are held by no process.
func SweepUnheld(dir string, minAge time.Duration, match func(name string) bool) ([]string, error) {
	if dir == "" {
		dir = DefaultDir
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("shm: sweeping %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !match(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		ok, err := removeIfStale(path, minAge)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// HoldLock marks the open file fd as live for SweepUnheld: it takes a shared flock on it,
// which lasts while f (or a mapping of it) is open in this process, and no longer than the
// process.
func HoldLock(fd int) error {
	return syscall.Flock(fd, syscall.LOCK_SH)
}

// removeIfStale removes path if nobody holds it (see SweepUnheld).
func removeIfStale(path string, minAge time.Duration) (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return false, nil // gone already, or not ours to look at
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || int(st.Uid) != os.Geteuid() {
		return false, nil
	}
	if time.Since(time.Unix(st.Mtim.Unix())) < minAge {
		return false, nil
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, nil
	}
	defer syscall.Close(fd)
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // a live creator holds it
	}
	// Remove the file this descriptor locked, not one put under its name since.
	var locked syscall.Stat_t
	if syscall.Fstat(fd, &locked) != nil || syscall.Lstat(path, &st) != nil || st.Ino != locked.Ino || st.Dev != locked.Dev {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("shm: removing the stale file %s: %w", path, err)
	}
	return true, nil
}
