package schedpolicy

import (
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxPasses bounds how often Apply lists the threads again because threads appeared while
// it set the others: a thread cloned from one that was not yet set starts under the old
// policy.
const maxPasses = 8

// Apply puts the threads of this process under p and returns the policy the calling
// process's main thread runs under afterwards, as Name spells it. An error names the thread
// that refused; the threads set before it keep the new policy.
func Apply(p Policy) (string, error) {
	if p == Batch {
		if err := setAll(unix.SCHED_NORMAL, unix.SCHED_BATCH); err != nil {
			return current(), err
		}
	}
	return current(), nil
}

// setAll moves every thread under policy from to policy to, listing the threads again until
// a pass finds none left under from.
func setAll(from, to int) error {
	for range maxPasses {
		tids, err := threads(os.Getpid())
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			pol, err := policyOf(tid)
			if err != nil {
				continue // the thread exited between the listing and now
			}
			if pol != from {
				continue
			}
			if err := setPolicy(tid, to); err != nil {
				if err == unix.ESRCH {
					continue
				}
				return fmt.Errorf("thread %d: sched_setscheduler(%s): %w", tid, Name(to), err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// threads lists the thread ids of process pid.
func threads(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing the threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

func policyOf(tid int) (int, error) {
	r, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r) &^ unix.SCHED_RESET_ON_FORK, nil
}

// setPolicy sets a non-real-time policy, whose only priority is 0.
func setPolicy(tid, policy int) error {
	var prio int32
	_, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(policy), uintptr(unsafe.Pointer(&prio)))
	if errno != 0 {
		return errno
	}
	return nil
}

func current() string {
	pol, err := policyOf(os.Getpid())
	if err != nil {
		return "unknown"
	}
	return Name(pol)
}

// ThreadPolicies returns the policy of every thread of process pid, by thread id, as Name
// spells them.
func ThreadPolicies(pid int) (map[int]string, error) {
	tids, err := threads(pid)
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(tids))
	for _, tid := range tids {
		if pol, err := policyOf(tid); err == nil {
			out[tid] = Name(pol)
		}
	}
	return out, nil
}

// Name is a kernel policy as chrt(1) names it.
func Name(policy int) string {
	switch policy {
	case unix.SCHED_NORMAL:
		return "normal"
	case unix.SCHED_BATCH:
		return "batch"
	case unix.SCHED_IDLE:
		return "idle"
	case unix.SCHED_FIFO:
		return "fifo"
	case unix.SCHED_RR:
		return "rr"
	case unix.SCHED_DEADLINE:
		return "deadline"
	}
	return "policy " + strconv.Itoa(policy)
}
