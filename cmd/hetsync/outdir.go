package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hetsync/hetsync/trainer/metrics"
)

// prepareRunDir checks train's --out before the first step and creates it, so that a path
// that cannot take the results fails the job at its start rather than throwing the whole run
// away at its end: a file, a directory that already holds a run, or a directory this process
// cannot write are errors naming the flag. An empty existing directory is taken (the launcher
// creates it before rank 0 checks it again).
func prepareRunDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("--out %s: is a file, not a directory", dir)
	case err == nil:
		if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); err == nil {
			return fmt.Errorf("--out %s: already holds a run (%s exists); choose a new directory", dir, metrics.ConfigFile)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: cannot create the run directory: %w", dir, err)
	}
	if err := checkWritable(dir); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	return nil
}

// checkWritable checks that this process can create a file in the run directory dir.
func checkWritable(dir string) error {
	probe, err := os.CreateTemp(dir, ".hetsync-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in the run directory: %w", err)
	}
	name := probe.Name()
	err = probe.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("cannot write in the run directory: %w", err)
	}
	return nil
}
