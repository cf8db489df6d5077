package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hetsync/hetsync/metrics"
)

// prepareRunDir checks train's --out before the first step and creates it, so that a path
// that cannot take the results fails the job at its start rather than throwing the whole run
// away at its end: a file, a directory that already holds a run, or a directory this process
// cannot write are errors naming the flag. An empty existing directory is taken (the launcher
// creates it before rank 0 checks it again). The directory is then locked for this job
// (lockRunDir) until the returned lock is closed; a directory another job holds is an error
// naming its pid, and the refused job writes nothing into it.
func prepareRunDir(dir string) (*runLock, error) {
	if err := checkNewRunDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: cannot create the run directory: %w", dir, err)
	}
	lock, err := lockRunDir("--out", dir)
	if err != nil {
		return nil, err
	}
	// Again under the lock: a job that held it until a moment ago may have written its run.
	if err := checkNewRunDir(dir); err != nil {
		lock.Close()
		return nil, err
	}
	if err := checkWritable(dir); err != nil {
		lock.Close()
		return nil, fmt.Errorf("--out %s: %w", dir, err)
	}
	return lock, nil
}

// checkNewRunDir checks that dir is a directory that holds no run, or does not exist.
func checkNewRunDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("--out %s: is a file, not a directory", dir)
	case err == nil:
		if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); err == nil {
			if err := checkNotHeld("--out", dir); err != nil {
				return err // a run in progress: say whose
			}
			return fmt.Errorf("--out %s: already holds a run (%s exists); choose a new directory", dir, metrics.ConfigFile)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	return nil
}

// checkOutputFile checks, before a command does its work, that it will be able to write its
// results to path at the end: a directory, a file it cannot write or a directory it cannot
// create files in would otherwise throw the work away. It leaves path as it was.
func checkOutputFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return errors.New("is a directory")
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("cannot write it: %w", err)
		}
		return f.Close()
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := probeDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("cannot create it: %w", err)
	}
	return nil
}

// checkWritable checks that this process can create a file in the run directory dir.
func checkWritable(dir string) error {
	if err := probeDir(dir); err != nil {
		return fmt.Errorf("cannot write in the run directory: %w", err)
	}
	return nil
}

// probeDir creates a file in dir and removes it.
func probeDir(dir string) error {
	probe, err := os.CreateTemp(dir, ".hetsync-write-check-*")
	if err != nil {
		return err
	}
	name := probe.Name()
	err = probe.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}
