// Package schedpolicy sets the kernel scheduling policy of a rank's threads. A rank of a
// collective spends its life in short bursts of work between waits for its peers; under the
// default policy every peer's wake-up may preempt the thread that is copying or reducing,
// and on a host with more runnable threads than cores those preemptions are what a call
// waits for. SCHED_BATCH (Linux) keeps a thread's time slice when another thread wakes up,
// needs no privilege and leaves priorities (nice) as they are.
//
// The policy on Linux belongs to each thread, not to the process: Apply sets it on every
// thread the process has, and the threads the Go runtime starts later inherit it from the
// thread that clones them.
//
// What it must never do: raise a thread's priority or demote a thread that someone started
// under a real-time, idle or deadline policy (Apply changes only threads under the default
// policy), fail a job because the policy could not be set (the caller warns and goes on),
// or act anywhere but Linux (elsewhere Apply is a no-op that says so).
package schedpolicy
