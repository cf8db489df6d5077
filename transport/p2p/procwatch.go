package p2p

import "github.com/hetsync/hetsync/internal/procstat"

// A peer that sends no heartbeat may be frozen, or merely starved of CPU: 64 ranks on two
// loaded cores go for seconds without running their heartbeat goroutines. Silence alone
// cannot tell the two apart, but for a peer on this rank's own kernel the kernel can: its
// process is stopped (SIGSTOP), gone, or running. The heartbeat monitor asks it before failing
// a silent peer of its host, so that an overloaded host does not fail a live job, while a
// stopped or dead rank is still failed within the peer timeout.

// watchProcs records the processes of the peers this rank can ask the kernel about.
func (hb *heartbeats) watchProcs(peers []peerInfo, local []locality) {
	if hb.rank >= len(peers) {
		return
	}
	me := peers[hb.rank].Proc
	procs := make([]procstat.ID, hb.size)
	netApart := make([]bool, hb.size)
	for r := range min(len(peers), len(local), hb.size) {
		if r != hb.rank && procstat.Watchable(me, peers[r].Proc, local[r].kernel) {
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

// proc is peer r's process if this rank can ask the kernel about it, else the zero procstat.ID.
func (hb *heartbeats) proc(r int) procstat.ID {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if r < 0 || r >= len(hb.procs) {
		return procstat.ID{}
	}
	return hb.procs[r]
}

// procCause is what an UnresponsiveError says of a process the kernel was asked about, ""
// when it was not.
func procCause(s procstat.State) string {
	if s == procstat.StateUnknown {
		return ""
	}
	return s.String()
}
