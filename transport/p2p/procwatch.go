package p2p

import (
	"errors"
	"io/fs"
	"os"

	"github.com/hetsync/hetsync/internal/procstat"
)

// A peer that sends no heartbeat may be frozen, or merely starved of CPU: 64 ranks on two
// loaded cores go for seconds without running their heartbeat goroutines. Silence alone
// cannot tell the two apart, but for a peer on this rank's own kernel the kernel can: its
// process is stopped (SIGSTOP), gone, or running. The heartbeat monitor asks it before failing
// a silent peer of its host, so that an overloaded host does not fail a live job, while a
// stopped or dead rank is still failed within the peer timeout.

// procID names a process on one kernel: its PID, its PID namespace and its start time (clock
// ticks after boot), so that a PID reused by another process is not taken for the rank.
type procID struct {
	PID   int    `json:"pid,omitempty"`
	PIDNS string `json:"pidns,omitempty"` // the target of /proc/self/ns/pid
	Start uint64 `json:"start,omitempty"` // /proc/PID/stat field 22
}

const pidNSLink = "/proc/self/ns/pid"

// selfProc is this process's procID; the zero value when /proc cannot tell (the monitor then
// judges this rank's silence by heartbeats alone).
func selfProc() procID {
	ns, err := os.Readlink(pidNSLink)
	if err != nil {
		return procID{}
	}
	pid := os.Getpid()
	_, start, err := readProcStat(pid)
	if err != nil {
		return procID{}
	}
	return procID{PID: pid, PIDNS: ns, Start: start}
}

// procState is what the kernel says of a process.
type procState int

const (
	procUnknown procState = iota // not watchable from here: judge by heartbeats alone
	procRunning                  // running, runnable or sleeping: alive
	procStopped                  // stopped by a signal or a tracer: frozen
	procGone                     // exited (or a zombie), or its PID now belongs to another process
)

func (s procState) String() string {
	switch s {
	case procRunning:
		return "running"
	case procStopped:
		return "stopped (SIGSTOP or a tracer)"
	case procGone:
		return "exited"
	}
	return "unknown"
}

// watchable says whether this rank can ask the kernel about peer p: both publish their
// process, they share a kernel (kernel: p's host proof was read) and a PID namespace, and p
// runs in another process (of ranks in one process the kernel knows nothing apart).
func watchable(me, p procID, kernel bool) bool {
	return kernel && me.PID > 0 && p.PID > 0 && p.PID != me.PID && me.PIDNS != "" && me.PIDNS == p.PIDNS
}

// state asks the kernel about p.
func (p procID) state() procState {
	if p.PID <= 0 {
		return procUnknown
	}
	st, start, err := readProcStat(p.PID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return procGone
	case err != nil:
		return procUnknown
	case start != p.Start:
		return procGone
	}
	if procstat.Stopped(st) {
		return procStopped
	}
	switch st {
	case 'Z', 'X', 'x':
		return procGone
	}
	return procRunning
}

// readProcStat returns the state letter and the start time of process pid.
func readProcStat(pid int) (byte, uint64, error) { return procstat.Read(pid) }

// watchProcs records the processes of the peers this rank can ask the kernel about.
func (hb *heartbeats) watchProcs(peers []peerInfo, local []locality) {
	if hb.rank >= len(peers) {
		return
	}
	me := peers[hb.rank].Proc
	procs := make([]procID, hb.size)
	netApart := make([]bool, hb.size)
	for r := range min(len(peers), len(local), hb.size) {
		if r != hb.rank && watchable(me, peers[r].Proc, local[r].kernel) {
			procs[r], netApart[r] = peers[r].Proc, local[r].netApart
		}
	}
	hb.mu.Lock()
	hb.procs, hb.netApart = procs, netApart
	hb.mu.Unlock()
}

// isNetApart says whether peer r runs on this kernel in another network namespace.
func (hb *heartbeats) isNetApart(r int) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return r >= 0 && r < len(hb.netApart) && hb.netApart[r]
}

// proc is peer r's process if this rank can ask the kernel about it, else the zero procID.
func (hb *heartbeats) proc(r int) procID {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if r < 0 || r >= len(hb.procs) {
		return procID{}
	}
	return hb.procs[r]
}

// procCause is what an UnresponsiveError says of a process the kernel was asked about, ""
// when it was not.
func procCause(s procState) string {
	if s == procUnknown {
		return ""
	}
	return s.String()
}
