//go:build !linux

package schedpolicy

// Apply sets nothing outside Linux, where SCHED_BATCH does not exist: every thread stays as
// the process was started.
func Apply(Policy) (string, error) { return string(Inherit), nil }
