//go:build !linux

package schedpolicy

import "errors"

// Apply sets nothing outside Linux, where SCHED_BATCH does not exist: every thread stays as
// the process was started.
func Apply(Policy) (string, error) { return string(Inherit), nil }

// ThreadPolicies reads the threads' policies on Linux only.
func ThreadPolicies(int) (map[int]string, error) {
	return nil, errors.New("thread scheduling policies are read on Linux only")
}
