package p2p

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/hetsync/hetsync/transport/shm"
)

// dataProto carries the bulk traffic of the "stream" data path.
const dataProto = protocol.ID("/hetsync/data/1")

const (
	tokenLen     = 32
	helloMagic   = "HSYNCDP1"
	helloMagicSM = "HSYNCSM1"               // a hello that also offers a shared-memory segment (path "shm")
	helloLen     = 8 + 8 + 4 + 4 + tokenLen // magic, job tag, from, to, token
	shmNameLen   = 64                       // after an HSYNCSM1 hello: the segment's file name, NUL-padded
	replyLen     = 8 + 1                    // magic, status
	helloTimeout = 10 * time.Second         // an accepted connection must say hello within this
	socketBuffer = 4 << 20                  // SO_SNDBUF / SO_RCVBUF of direct connections
)

// Hello statuses sent back by the listening rank.
const (
	helloOK byte = iota
	helloBadMagic
	helloWrongJob
	helloWrongTarget
	helloBadFrom
	helloBadToken
	helloDuplicate
	helloClosed
	helloWrongPeer
	helloShmNotUnix
	helloShmFailed
	helloCrossed
)

// autoSameHost is the path "auto" takes between ranks on one host: shared memory, whose ring
// both ranks map takes the socket's kernel buffers off the path; it beat Unix sockets at every
// size measured (docs/results/tuning.md, "Shared memory as auto's same-host path"). Dial
// offers shared memory and falls back to a Unix socket when the listener cannot map the
// segment.
const autoSameHost = DataPathShm

// helloRefusedError is a hello the listener answered with a status other than helloOK.
type helloRefusedError struct{ status byte }

func (e *helloRefusedError) Error() string { return "refused: " + helloStatusText(e.status) }

// crossedDial says whether err is a refusal because the pair is already linked, or is being
// linked by the listener's own dial: the dialer then waits for the listener's connection.
func crossedDial(err error) bool {
	var r *helloRefusedError
	return errors.As(err, &r) && (r.status == helloCrossed || r.status == helloDuplicate)
}

func helloStatusText(s byte) string {
	switch s {
	case helloOK:
		return "ok"
	case helloBadMagic:
		return "not a hetsync data-path hello"
	case helloWrongJob:
		return "hello from another job"
	case helloWrongTarget:
		return "hello addressed to another rank"
	case helloBadFrom:
		return "the dialing rank is not another rank of the job"
	case helloBadToken:
		return "bad token"
	case helloDuplicate:
		return "that rank is already connected"
	case helloClosed:
		return "no longer accepting connections"
	case helloWrongPeer:
		return "libp2p peer identity does not match the rank in the hello"
	case helloShmNotUnix:
		return "shared memory offered over a connection that is not a same-host Unix socket"
	case helloShmFailed:
		return "the listener could not map the shared-memory segment (see its log)"
	case helloCrossed:
		return "the listener, the lower rank, is dialing this rank itself: its connection is kept"
	}
	return "unknown status " + strconv.Itoa(int(s))
}

// pathFor decides the data path between ranks a and b, given whether they proved that they
// share a host (see hostproof.go). The lower rank (the dialer) decides; the listener serves
// whichever path it is dialed on.
func pathFor(cfg Config, a, b peerInfo, loc locality) (string, error) {
	switch cfg.DataPath {
	case DataPathStream, DataPathTCP, DataPathTLS:
		return cfg.DataPath, nil
	case DataPathUnix, DataPathShm, DataPathCMA:
		if !loc.same {
			return "", fmt.Errorf("rank %d (host %q) and rank %d (host %q) do not share a host: %s; DataPath %q needs both on one host",
				a.Rank, a.Hostname, b.Rank, b.Hostname, loc.why, cfg.DataPath)
		}
		return cfg.DataPath, nil
	}
	if loc.same {
		return autoSameHost, nil
	}
	return autoNetwork(cfg), nil
}

// autoNetwork is the path "auto" takes between ranks on different hosts: the direct TLS
// connection when the job asked for security, which is what makes it as safe as the libp2p
// stream (both ends proven by their rank keys, traffic encrypted) at a fraction of the CPU;
// plain TCP when it did not.
func autoNetwork(cfg Config) string {
	if cfg.Security == SecurityNone {
		return DataPathTCP
	}
	return DataPathTLS
}

// needsTCP / needsTLS / needsUnix / needsStream say which listeners a rank opens before the
// rendezvous, when it cannot yet know where its peers run.
func needsTCP(cfg Config) bool {
	return cfg.DataPath == DataPathTCP || (cfg.DataPath == DataPathAuto && autoNetwork(cfg) == DataPathTCP)
}
func needsTLS(cfg Config) bool {
	return cfg.DataPath == DataPathTLS || (cfg.DataPath == DataPathAuto && autoNetwork(cfg) == DataPathTLS)
}
func needsUnix(cfg Config) bool {
	return cfg.DataPath == DataPathUnix || cfg.DataPath == DataPathShm || cfg.DataPath == DataPathCMA || cfg.DataPath == DataPathAuto
}
func needsStream(cfg Config) bool {
	return cfg.DataPath == DataPathStream
}

// unixSocketPath is where rank listens for same-host peers. A file (not the abstract
// namespace) so ranks in different network namespaces of one host still meet.
func unixSocketPath(tag jobTag, rank int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("hetsync-%s-%d.sock", tag, rank))
}

// listenUnix listens on path, replacing a stale socket file left by a dead process.
func listenUnix(path string) (*net.UnixListener, error) {
	if len(path) > 104 {
		return nil, fmt.Errorf("unix socket path %q is longer than 104 bytes (set TMPDIR to a shorter directory)", path)
	}
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return l, err
	}
	if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
		c.Close()
		return nil, fmt.Errorf("unix socket %s is in use by a live process (another rank with the same job secret and rank?)", path)
	}
	if rerr := os.Remove(path); rerr != nil {
		return nil, fmt.Errorf("removing stale unix socket %s: %w", path, rerr)
	}
	return net.ListenUnix("unix", addr)
}

func tuneConn(c net.Conn) {
	switch cc := c.(type) {
	case *net.TCPConn:
		_ = cc.SetNoDelay(true)
		_ = cc.SetReadBuffer(socketBuffer)
		_ = cc.SetWriteBuffer(socketBuffer)
	case *net.UnixConn:
		_ = cc.SetReadBuffer(socketBuffer)
		_ = cc.SetWriteBuffer(socketBuffer)
	}
}

// deadliner is what both net.Conn and network.Stream offer.
type deadliner interface {
	SetDeadline(time.Time) error
}

type dataConn interface {
	io.ReadWriteCloser
	deadliner
}

func encodeHello(tag jobTag, from, to int, token []byte) []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic)
	copy(b[8:], tag[:])
	binary.BigEndian.PutUint32(b[16:], uint32(from))
	binary.BigEndian.PutUint32(b[20:], uint32(to))
	copy(b[24:], token)
	return b
}

// encodeShmHello is a hello that offers the shared-memory segment named shmName: the hello
// with magic HSYNCSM1, followed by the name padded to shmNameLen bytes.
func encodeShmHello(tag jobTag, from, to int, token []byte, shmName string) []byte {
	b := append(encodeHello(tag, from, to, token), make([]byte, shmNameLen)...)
	copy(b, helloMagicSM)
	copy(b[helloLen:], shmName)
	return b
}

// shmOptions are the pipe options of the shared-memory path to rank peer. Only "cma" moves
// writes with a single copy: process_vm_readv pins and copies the sender's pages one by one,
// which on a host with few cores is slower than two copies through a ring that stays in
// cache, and a write that waits for the peer's reader costs a wake-up more
// (docs/results/cma.md).
func shmOptions(cfg Config, peer int) shm.Options {
	o := shm.Options{Peer: "rank " + strconv.Itoa(peer), SingleCopyMin: -1}
	if cfg.DataPath == DataPathCMA {
		o.SingleCopyMin, o.SingleCopyMax = cfg.SingleCopyMin, cfg.SingleCopyMax
	}
	return o
}

// logSingleCopy reports, on the "cma" path, a peer whose memory this rank may not read: its
// large writes to this rank take the rings (see DataPaths for what each pair uses).
func (cfg Config) logSingleCopy(peer int, c dataConn) {
	p, ok := c.(*shm.Pipe)
	if !ok || cfg.DataPath != DataPathCMA {
		return
	}
	if in, _, refused := p.SingleCopy(); !in {
		cfg.Logger.Warn("hetsync data path: no single copy from a same-host rank, its writes take the shared-memory rings",
			"rank", cfg.Rank, "peer", peer, "err", refused)
	}
}
