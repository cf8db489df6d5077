package shm

import (
	"errors"
	"fmt"
)

// Ring sizes: each direction of a pipe has one ring of RingSize bytes. The default holds a
// whole 1 MiB collective segment (collective.DefaultSegmentBytes) with its frame header, so a
// sender never waits for the receiver in the middle of one.
const (
	DefaultRingSize = 2 << 20
	MinRingSize     = 64 << 10
	MaxRingSize     = 256 << 20
)

// DefaultHostRingBudget is how many bytes of rings HostRingSize lets the pipes among the ranks
// of one host take together. Every pair of a host's ranks has a pipe, and its segment is
// populated when created, so with DefaultRingSize rings a host of n ranks maps and touches
// 4 MiB × n(n-1)/2 while the job forms: 24 MiB at 4 ranks, 8 GiB at 64. The budget keeps
// DefaultRingSize up to 23 ranks and shrinks the rings beyond; a smaller budget would form
// a large job little faster and cost its large messages more, since a ring that cannot hold
// a whole collective segment makes the writer wait for the reader inside it
// (docs/results/oversubscribed.md).
const DefaultHostRingBudget = 1 << 30

// HostRingSize is the ring size of a pipe between two of localRanks ranks on one host (the
// ranks themselves included) whose localRanks(localRanks-1) rings together should stay
// within budget bytes (0 means DefaultHostRingBudget): the largest power of two that does,
// but never more than DefaultRingSize, which serves a few ranks per host, and never less
// than MinRingSize, the smallest a segment may have: from 129 ranks on one host at the
// default budget the floor wins and the rings take more than the budget.
//
// The creator of a segment chooses its ring size and the opener takes it from the segment
// (Open ignores Options.RingSize), so the two ends of a pipe agree even when they count
// their host's ranks differently.
func HostRingSize(localRanks int, budget int64) (int, error) {
	if localRanks < 1 {
		return 0, fmt.Errorf("shm ring size: %d ranks on the host; want at least 1", localRanks)
	}
	if budget < 0 {
		return 0, fmt.Errorf("shm ring size: the host's ring budget %d is negative", budget)
	}
	if budget == 0 {
		budget = DefaultHostRingBudget
	}
	size := DefaultRingSize
	rings := int64(localRanks) * int64(localRanks-1)
	for size > MinRingSize && rings*int64(size) > budget {
		size /= 2
	}
	return size, nil
}

// DefaultSingleCopyMin is the write size from which a pipe hands the reader the writer's own
// buffer instead of copying it through the ring (see SingleCopy in the package documentation),
// when single copies are asked for: below it the system call, the liveness check and the
// writer's wait for the reader cost more than the ring's second copy. docs/results/cma.md has
// the measurements, and why transport/p2p uses single copies only on its "cma" path.
const DefaultSingleCopyMin = 256 << 10

// DefaultDir is where segments are created: tmpfs, shared by every process of the host.
const DefaultDir = "/dev/shm"

// Default waiting: how many times a side that finds nothing to do polls, then yields the CPU,
// before it sleeps until the peer rings.
const (
	DefaultSpin   = 64
	DefaultYields = 4
)

// ErrPeerGone is wrapped by the errors of a pipe whose peer process went away (exited or
// crashed) without closing it.
var ErrPeerGone = errors.New("peer process gone")

// FullError says that the shared-memory directory (a tmpfs, /dev/shm) has no room for a
// segment or an arena: without it, a full /dev/shm shows only as connections that end before
// their hello.
type FullError struct {
	Dir string
	// Want is the bytes asked for; Free and Size are the directory's file system's free and
	// total bytes (-1 when they could not be read).
	Want, Free, Size int64
}

func (e *FullError) Error() string {
	room := "its free space could not be read"
	if e.Free >= 0 {
		room = fmt.Sprintf("%s of its %s free", mib(e.Free), mib(e.Size))
	}
	return fmt.Sprintf("%s is full: %s wanted, %s (remove stale files there, or give the host or container a larger %s, e.g. docker --shm-size)",
		e.Dir, mib(e.Want), room, e.Dir)
}

// mib formats a byte count in MiB for messages.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Options configure Create, Open and the Pipe. The zero value selects every default.
type Options struct {
	// RingSize is the capacity of each direction: a power of two in [MinRingSize,
	// MaxRingSize]; 0 means DefaultRingSize. Only the creator's counts.
	RingSize int
	// Dir is the directory of the segment file; "" means DefaultDir. Both sides must use the
	// same directory (only the file's name is exchanged).
	Dir string
	// Peer names the other side in errors ("rank 3"); "" means "peer".
	Peer string
	// Spin and Yields say how often a side that has nothing to do polls the ring, then
	// yields the CPU, before it sleeps; 0 means the default, a negative value none.
	Spin, Yields int
	// SingleCopyMin is the smallest Write that this end offers the peer to read straight from
	// the caller's buffer (process_vm_readv) when the peer proved at connect time that it can;
	// smaller writes, and every write to a peer that cannot, go through the ring. 0 means
	// DefaultSingleCopyMin; a negative value turns the single-copy path off both ways: this
	// end neither offers its buffers nor reads the peer's.
	SingleCopyMin int
	// SingleCopyMax, when positive, is the largest Write offered as a single copy: larger ones
	// go through the ring, where the writer's and the reader's copies overlap chunk by chunk
	// on two cores while a single copy is one core's work. 0 means no bound.
	SingleCopyMax int
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if o.RingSize != 0 && (o.RingSize < MinRingSize || o.RingSize > MaxRingSize || o.RingSize&(o.RingSize-1) != 0) {
		return fmt.Errorf("shm options: RingSize %d must be 0 (default) or a power of two in [%d, %d]", o.RingSize, MinRingSize, MaxRingSize)
	}
	if o.Spin > 1<<20 {
		return fmt.Errorf("shm options: Spin %d is more than %d", o.Spin, 1<<20)
	}
	if o.SingleCopyMax < 0 {
		return fmt.Errorf("shm options: SingleCopyMax %d is negative", o.SingleCopyMax)
	}
	if o.Yields > 1<<10 {
		return fmt.Errorf("shm options: Yields %d is more than %d", o.Yields, 1<<10)
	}
	return nil
}

func (o Options) withDefaults() (Options, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.RingSize == 0 {
		o.RingSize = DefaultRingSize
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Peer == "" {
		o.Peer = "peer"
	}
	switch {
	case o.Spin == 0:
		o.Spin = DefaultSpin
	case o.Spin < 0:
		o.Spin = 0
	}
	switch {
	case o.Yields == 0:
		o.Yields = DefaultYields
	case o.Yields < 0:
		o.Yields = 0
	}
	if o.SingleCopyMin == 0 {
		o.SingleCopyMin = DefaultSingleCopyMin
	}
	return o, nil
}

// Layout of a segment (see the package documentation).
const (
	magic      = "HSYNSHM1"
	version    = 2
	procOff    = 1024 // the creator's process block, then the opener's
	procSize   = 256
	ctlOff     = 4096
	ctlSize    = 2048
	dataOff    = 8192
	namePrefix = "hetsync-shm-"

	// Offsets of the fields of a control block.
	offHead    = 0    // uint64, written by the producer
	offTail    = 128  // uint64, written by the consumer
	offRWait   = 256  // uint32, 1 while the consumer is (about to be) asleep
	offWWait   = 384  // uint32, 1 while the producer is (about to be) asleep
	offWClosed = 512  // uint32, the producer will write no more
	offRClosed = 640  // uint32, the consumer will read no more
	offRemote  = 1024 // uint64, the single-copy write's state: posted by the producer, advanced by the consumer
	offDesc    = 1152 // 3 x uint64, producer only: address, length and stream position of the posted buffer
	offReads   = 1280 // uint32, the consumer: 1 when it proved that it can read the producer's memory

	// Offsets of the fields of a process block, written once by its side before the peer maps
	// the segment (the creator) or before it answers the hello (the opener).
	offPID   = 0  // uint32, the process id
	offProbe = 8  // uint64, address of the probe nonce in that process's memory
	offNonce = 16 // the nonce's bytes
	probeLen = 32
)
