package collective

import (
	"sync/atomic"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// LinkClass is the kind of link a message from this rank to a peer crosses.
type LinkClass uint8

const (
	// LinkHost: the peer provably shares this rank's host (transport.HostLocality): shared
	// memory, a Unix socket or loopback.
	LinkHost LinkClass = iota
	// LinkHosts: the peer is on another host of this rank's group of hosts (rack), or on any
	// other host when the job has no link matrix to group its hosts by.
	LinkHosts
	// LinkGroups: the peer is in another group of hosts, the groups the planner reads from the
	// job's link matrix (the well-connected hosts of one rack, see layout).
	LinkGroups
	// NumLinkClasses is the number of classes.
	NumLinkClasses
)

// String names the class as the run directory and the report do.
func (k LinkClass) String() string {
	switch k {
	case LinkHost:
		return "host"
	case LinkHosts:
		return "hosts"
	case LinkGroups:
		return "groups"
	}
	return "unknown"
}

// LinkBytes is what a rank sent on each class of link, payload bytes as they went on the wire
// (encoded, for a compressed allreduce; headers not counted), indexed by LinkClass.
type LinkBytes [NumLinkClasses]int64

// LinkCounter counts the bytes a rank sends by the class of link each message crosses. The
// class of every peer is fixed when the counter is made, so that counting a message is one
// table read and one atomic add: it runs on the executor's hot path.
type LinkCounter struct {
	class []LinkClass // peer rank → class
	sent  [NumLinkClasses]atomic.Int64
}

// NewLinkCounter classifies every peer of ep: on this rank's host by the transport's proof
// (transport.SameHost, never a hostname), else in another group when links (the job's matrix,
// whose ranks must be ep's) puts the peer's host in another group of hosts than this rank's,
// else on another host. A nil links has no groups.
func NewLinkCounter(ep transport.Endpoint, links *topology.Matrix) *LinkCounter {
	same := transport.SameHost(ep)
	lc := &LinkCounter{class: make([]LinkClass, ep.Size())}
	var groupOfRank func(r int) int
	if links != nil && links.P == ep.Size() {
		l := newLayout(links)
		groupOf := make([]int, len(l.hosts))
		for g, hosts := range l.groups {
			for _, h := range hosts {
				groupOf[h] = g
			}
		}
		groupOfRank = func(r int) int { return groupOf[links.Host[r]] }
	}
	me := ep.Rank()
	for q := range lc.class {
		switch {
		case same[q]:
			lc.class[q] = LinkHost
		case groupOfRank != nil && groupOfRank(q) != groupOfRank(me):
			lc.class[q] = LinkGroups
		default:
			lc.class[q] = LinkHosts
		}
	}
	return lc
}

// newCommLinkCounter is the counter of a Comm over ep, whose job endpoint is base: only the
// job's own endpoint has the ranks the job's matrix describes, so a sub-communicator's counter
// tells hosts apart but not groups.
func newCommLinkCounter(ep, base transport.Endpoint, links *topology.Matrix) *LinkCounter {
	if ep != base {
		links = nil
	}
	return NewLinkCounter(ep, links)
}

// arenaShare is what rank me of p writes into its host's arena for a call of kind over buf:
// its whole buffer for a reduction, its block for an all-gather, the buffer at the root of a
// broadcast. That is what it would otherwise send once over a link of its host.
func arenaShare(kind collKind, buf Buffer, root, me, p int) int {
	switch kind {
	case kindAllGather:
		lo, hi := Partition(buf.Len(), p, me)
		return (hi - lo) * buf.DType.Size()
	case kindBroadcast:
		if me != root {
			return 0
		}
	}
	return len(buf.Bytes)
}

// Class is the class of the link to peer.
func (lc *LinkCounter) Class(peer int) LinkClass { return lc.class[peer] }

// Count adds n bytes sent to peer; a peer outside the job (which the endpoint refuses) is not
// counted.
func (lc *LinkCounter) Count(peer, n int) {
	if peer >= 0 && peer < len(lc.class) {
		lc.sent[lc.class[peer]].Add(int64(n))
	}
}

// CountClass adds n bytes sent on a link of class k, for traffic that has no single peer (the
// shared-memory arena: a rank writes its part once and every rank of its host reads it).
func (lc *LinkCounter) CountClass(k LinkClass, n int) { lc.sent[k].Add(int64(n)) }

// Bytes is what was counted so far.
func (lc *LinkCounter) Bytes() LinkBytes {
	var b LinkBytes
	for k := range b {
		b[k] = lc.sent[k].Load()
	}
	return b
}

// LinkBytes is what the collective calls of c have sent on each class of link: what BytesSent
// counts, the send times that attribute waits to peers (attrib.go), and what this rank wrote
// into its host's shared-memory arena for the others (its part of each arena call, once,
// counted on LinkHost). Everything c sends over its endpoint is in one class.
func (c *Comm) LinkBytes() LinkBytes { return c.sentBy.Bytes() }
