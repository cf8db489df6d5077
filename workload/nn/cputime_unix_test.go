//go:build unix

package nn

import (
	"syscall"
	"time"
)

// processCPUTime is the CPU time (user + system) the process has used. On a shared host it
// measures the work done, not the time waited for a core.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
