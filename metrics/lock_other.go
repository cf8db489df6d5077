//go:build !unix

package metrics

// LockHolder reports no holder: run directories are locked (flock) only on Unix systems.
func LockHolder(dir string) (pid int, held bool) { return 0, false }
