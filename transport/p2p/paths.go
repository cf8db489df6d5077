package p2p

import (
	"net"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/hetsync/hetsync/transport/shm"
)

// DataPaths names the data path each peer's connection took ("cma", "shm", "unix", "tcp",
// "tls", "stream"; "" for this rank itself), as the connection is, after any fallback of
// "auto" and, for "cma", after the kernel's verdict: a pipe on which neither side may read the
// other's memory is "shm". For a peer this rank holds no connection to yet, it is the path the
// pair is to take (pathFor), so that the answer does not depend on which pairs have talked:
// auto plans by it (collective's onSharedMemory) on every rank alike.
func (e *endpoint) DataPaths() []string {
	conns := e.acc.links()
	paths := make([]string, len(conns))
	for r, c := range conns {
		switch c := c.(type) {
		case nil:
			if r != e.cfg.Rank && r < len(e.local) {
				lo, hi := min(r, e.cfg.Rank), max(r, e.cfg.Rank)
				paths[r], _ = pathFor(e.cfg, peerInfo{Rank: lo}, peerInfo{Rank: hi}, e.local[r])
			}
		case *shm.Pipe:
			paths[r] = DataPathShm
			if in, out, _ := c.SingleCopy(); in || out {
				paths[r] = DataPathCMA
			}
		case *secureConn:
			paths[r] = DataPathTLS
		case network.Stream:
			paths[r] = DataPathStream
		case *net.UnixConn:
			paths[r] = DataPathUnix
		case *net.TCPConn:
			paths[r] = DataPathTCP
		default:
			paths[r] = "?"
		}
	}
	return paths
}

// tcpLargeSegment is the segment size of large collectives over plain TCP
// (transport.LargeSegmenter).
const tcpLargeSegment = 4 << 20

// LargeSegmentBytes is tcpLargeSegment when the job's data path is "tcp" (on which every
// connection, dialed now or later, is plain TCP), else 0: the larger segments (and the chunked allreduce that goes
// with them) were measured over TCP only, and shared memory is faster with the default
// (docs/results/tcp-large.md). The collectives cut their messages by this answer, so every
// rank must give the same one: the data path is the job's own setting, where with "auto" a
// rank whose peers are all on other hosts would say yes while its peers with a same-host
// link say no.
func (e *endpoint) LargeSegmentBytes() int {
	if e.cfg.DataPath != DataPathTCP {
		return 0
	}
	return tcpLargeSegment
}
