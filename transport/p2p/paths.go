package p2p

import (
	"net"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/hetsync/hetsync/transport/shm"
)

// DataPaths names the data path each peer's connection took ("cma", "shm", "unix", "tcp",
// "tls", "stream"; "" for this rank itself), as the connection is, after any fallback of
// "auto" and, for "cma", after the kernel's verdict: a pipe on which neither side may read the
// other's memory is "shm".
func (e *endpoint) DataPaths() []string {
	paths := make([]string, len(e.conns))
	for r, c := range e.conns {
		switch c := c.(type) {
		case nil:
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

// LargeSegmentBytes is tcpLargeSegment when the job's data path is "tcp" and every peer's
// connection is plain TCP, else 0: the larger segments (and the chunked allreduce that goes
// with them) were measured over TCP only, and shared memory is faster with the default
// (docs/results/tcp-large.md). The collectives cut their messages by this answer, so every
// rank must give the same one: the data path is the job's own setting, where with "auto" a
// rank whose peers are all on other hosts would say yes while its peers with a same-host
// link say no.
func (e *endpoint) LargeSegmentBytes() int {
	if e.cfg.DataPath != DataPathTCP {
		return 0
	}
	for r, c := range e.conns {
		if _, ok := c.(*net.TCPConn); !ok && r != e.cfg.Rank {
			return 0
		}
	}
	return tcpLargeSegment
}
