// Package shm is a byte pipe between two processes on one host over a shared memory mapping:
// the data path for ranks on the same host; and the arena, memory that all ranks of a host
// map. It moves and shares bytes; it knows nothing of frames or collectives (transport.NewStreamEndpoint frames messages over it like over a socket).
//
// # Segment
//
// One side (Create) makes a file in /dev/shm (mode 0600, a random name, space reserved with
// fallocate so that a full tmpfs is an error here and never a SIGBUS later) and maps it; the
// other side (Open) is told the file's name over an authenticated channel, checks the name,
// the owner and the header, and maps it too. Either side then unlinks the file (Unlink): once
// both have mapped it the name is no longer needed, and no file outlives the job even if a
// process dies. A process killed between Create and the unlink leaves its file behind:
// SweepStale removes such files, and only those, because a creator holds a shared flock on its
// file for as long as it has it open or mapped, which the kernel drops when the process dies.
//
// Layout (all integers little-endian, offsets in bytes):
//
//	   0  magic "HSYNSHM1", version, ring size
//	1024  process block of the creator (pid, address and bytes of a probe nonce), 256 bytes
//	1280  process block of the opener
//	4096  control block of ring 0 (creator -> opener), 2048 bytes
//	6144  control block of ring 1 (opener -> creator)
//	8192  data of ring 0 (RingSize bytes), then data of ring 1
//
// A control block keeps each field on its own 128-byte line (two cache lines, against the
// adjacent-line prefetcher): head (bytes ever written, producer only), tail (bytes ever read,
// consumer only), the consumer's and the producer's "waiting" flags, the closed flags of
// both ends, and the single-copy fields: the state of a posted write, its descriptor, and the
// consumer's verdict on whether it can read the producer's memory.
//
// # Pipe
//
// Each direction is a single-producer, single-consumer ring. Write copies into the ring and
// publishes head every chunk (at most 256 KiB), so the reader starts copying out while a
// large write (larger than the ring, even) is still streaming in; Read copies from the ring
// straight into the caller's buffer and publishes tail the same way. Steady-state Read and
// Write allocate nothing and make no system call while the other side keeps up.
//
// Waiting: a side that finds nothing to do polls a little, lets its process's other
// goroutines run, yields the CPU a few times (the ranks of a host usually outnumber its
// cores), then raises its "waiting" flag, looks once more, and sleeps. The other side rings
// only when that flag is up (it clears it with a compare-and-swap, so one wake costs one
// system call). The doorbell is a byte on the link, a Unix socket between the two processes:
// the sleeper is parked in Go's network poller, holding no thread and no P. Not a futex on the
// shared mapping: a goroutine blocked in a futex system call keeps its P until the runtime's
// monitor takes it back, which stalls the rank's other goroutines whenever more of them sleep
// than there are Ps, as they do when a host's ranks outnumber its cores
// (docs/results/tuning.md has the measurement).
//
// # Lending
//
// Lend takes the next bytes of the stream and returns them in place instead of copying them
// out: a read-only slice of the shared mapping, which a reader (transport's stream endpoint,
// for a collective that reduces a received segment) consumes where it lies, one copy fewer.
// Each side maps the ring it reads a second time, twice back to back (the mirror), so a range
// that wraps the ring's end is still one slice. The tail published to the producer stays at the
// start of the oldest lend not yet given back (Return), so the producer never overwrites a lent
// byte; Close leaves the mapping in place until the last lend is back. What is lent at once is
// bounded by half the ring (LendMax), so the producer always has the other half for what
// follows; beyond it Lend declines and the caller copies. A reader that holds lent bytes and
// waits for more of the same pipe must give them back first, or the producer may find the ring
// full.
//
// # Single copy
//
// A write of at least Options.SingleCopyMin bytes (DefaultSingleCopyMin) does not go through
// the ring when the reader can read the writer's memory: the writer posts the buffer's address,
// length and stream position in its control block and waits; the reader copies straight from
// the writer's buffer into its own with process_vm_readv, one copy instead of two, and the
// writer returns once every byte was taken (so a single-copy Write waits for the peer's Read).
// The state word holds generation, status and the bytes taken, so the reader's progress and
// the writer's withdrawal (deadline, close, peer gone) are one compare-and-swap each and never
// both happen: a withdrawn write returns exactly the count the reader took, and the stream
// goes on with the next write. The caller's buffer stays reachable until then (Go's collector
// does not move heap objects; runtime.KeepAlive keeps it alive).
//
// Whether the reader may read the writer is decided once per pipe and direction when the pipe
// is made: each side writes its pid and a random nonce's address into its process block, and
// the other reads the nonce back with process_vm_readv. Another user, Yama's ptrace_scope or a
// container's seccomp profile make that fail; the direction then stays on the ring for good
// and SingleCopy says why. A writer that dies mid-copy is noticed by the system call (ESRCH)
// or, when its pid could already name another process, by a pidfd checked after every copy:
// the reader fails with ErrPeerGone instead of returning bytes of another process.
//
// Deadlines (SetReadDeadline, SetWriteDeadline) behave like a net.Conn's: a blocked call
// returns os.ErrDeadlineExceeded when its deadline passes or is moved into the past, keeping
// the bytes already transferred. Close may be called from any goroutine; blocked calls return
// net.ErrClosed. CloseWrite ends the outgoing direction: the peer reads what is left, then
// io.EOF.
//
// Liveness: the link stays open for the pipe's lifetime. When the peer process exits or
// crashes without closing the pipe, the kernel closes its end, the pipe's watcher goroutine
// (which reads the doorbells) sees the link end, and every blocked or later call fails with an
// error naming the peer (wrapping ErrPeerGone), after the reader has drained what the peer had
// written. Sleeps also time out every 200 ms, so no wait depends on a single wake-up.
//
// # Arena
//
// An arena is one file that every rank of a one-host job maps (CreateArena by one rank,
// OpenArena by the others, told its name over an authenticated channel): the memory behind
// transport.Arena, which the collective layer lays out as it likes. The file is created like a
// segment (mode 0600, a random name "hetsync-arena-" and 32 hex digits, the creator's shared
// flock on it until Unlink, so SweepStale removes it only after its creator died) but sparse
// and not populated: a page costs memory once a rank touches it (a tmpfs without room for the
// whole arena at creation is an error then, not a SIGBUS later). The creator unlinks it
// once every rank has mapped it. A header of one page or more comes first: magic "HSYNARN1",
// version, rank count and data size, then a 64-byte slot per rank with its pid, the inode of
// its pid namespace and its state (mapped, closed); the data (Bytes) starts at the next page.
//
// Wait sleeps on a word of the data with FUTEX_WAIT (shared, not private: the ranks are
// processes) and Wake wakes every sleeper on it with FUTEX_WAKE, both raw system calls: a
// non-raw one would hand the rank's P back to the runtime and wake its monitor thread on every
// sleep, the cost that decides a collective's time when the ranks outnumber the cores
// (docs/results/oversubscribed.md). A raw sleep keeps the P, so no other goroutine of the rank
// runs meanwhile: sleeps last at most 2 ms, after which Wait asks whether it should give up and
// lets the rank's other goroutines (heartbeats, readers) run before it sleeps again. It gives
// up when its context ends, when the arena is closed, when another rank's slot says closed,
// when a rank's process exited (a pidfd per rank of the same pid namespace, all polled in one
// raw ppoll) or when the caller's own verdict (ArenaOptions.Gone: heartbeats) names a rank.
// With ArenaOptions.Spin (every rank has a core) Wait first polls the word a few hundred
// nanoseconds, since the word may change while it looks. With ArenaOptions.Poll it then looks
// again for up to that long, yielding the CPU (sched_yield) between looks, before it sleeps: on
// a host whose ranks outnumber the cores, the ranks still working get the core, and a rank
// whose word changes takes it back without a wake-up, which a barrier would otherwise pay once
// per rank (docs/results/oversubscribed.md, "Polling the arena").
//
// Close marks the rank's slot closed and replaces the shared mapping by private zero pages of
// the same range: the shared memory is given back, and a collective that the endpoint's Close
// interrupts reads zeros instead of faulting.
//
// This package must never: keep process-wide mutable state; let a peer read a buffer that a
// Write has returned, or return bytes copied after the writer withdrew them; let the producer
// write over bytes lent and not given back, or unmap them; leave a mapping, a file or a
// goroutine behind after Close (or after a failed Create/Open; an arena's range stays, as
// private zero pages); unmap memory another goroutine may still touch; sleep in a futex
// without a bound; trust the other process's control words to stay in range (a corrupt head
// or tail is an error, not an out-of-bounds copy); or wait without a bound on a dead peer.
package shm
