// Package transport moves bytes between the ranks of a job. It knows ranks, channels and
// framed messages; it never knows what an allreduce is, and it never interprets a payload.
//
// Every implementation keeps one FIFO per (peer, channel): messages sent by rank a to rank b on
// channel c arrive at b in the order a sent them. Collectives rely on that order and on the
// header check in Recv, so that two ranks that disagree about which collective they are running
// get an error naming both ranks instead of a hang or a silently wrong result.
//
// Implementations: NewMemJob (in-process, for tests and simulations), NewStreamEndpoint (framed
// messages over one byte stream per peer: TCP, Unix sockets or libp2p streams),
// NewDialingStreamEndpoint (the same, each stream opened when a Send or Recv first needs the
// peer, or taken from the peer that opened it: Attacher), and the libp2p job in transport/p2p,
// which connects that way.
//
// What an endpoint offers beyond Endpoint is an optional interface (Borrower, ArenaHolder,
// HostLocality, Liveness, LargeSegmenter, PeerFailer), and As is the one way to find one: it
// looks at the endpoint, then down the chain of decorators (Decorator's Unwrap), like
// errors.As. A decorator that leaves an interface's meaning alone needs only Unwrap to pass it
// on; one that changes it (renumbers ranks, or must keep traffic on its own path, as Delayed
// hides the arena) implements the interface itself.
//
// # Wire format
//
// A stream carries frames back to back. Each frame is a 48-byte header followed by the wire
// payload; all integers are little-endian:
//
//	off size field
//	  0    4 magic "HSYN"
//	  4    1 version, 1
//	  5    1 flags: bit 0 = the payload checksum is present
//	  6    1 codec (Codec: 0 none, 1 s2, 2 zstd, 3 fp16, 4 bf16)
//	  7    1 reserved, 0
//	  8    2 channel
//	 10    2 reserved, 0
//	 12    4 op signature
//	 16    8 sequence number
//	 24    4 segment
//	 28    4 raw payload length (what Recv returns)
//	 32    4 wire payload length (the bytes that follow)
//	 36    4 CRC-32C of the wire payload, 0 without the flag
//	 40    4 reserved, 0
//	 44    4 CRC-32C of header bytes 0..43
//
// A receiver checks, in this order: magic, version, header checksum, reserved bytes, flags,
// codec, lengths (against its message limit and against each other: none has raw = wire, fp16
// and bf16 have raw = 2*wire with raw a multiple of 4, an empty payload is empty on both
// sides), then the payload checksum, then that the payload decodes to exactly the raw length.
// The first failure is a *FrameError naming both ranks; the stream from that peer is then out
// of step, so the endpoint stops reading it, closes it, and fails every later Recv from that
// peer with the same error. A stream that ends between frames is a *PeerError (the peer closed
// the connection); one that ends inside a frame wraps io.ErrUnexpectedEOF.
//
// Codecs: s2 and zstd (klauspost/compress, fastest level) are lossless and pay only on links
// of about 1 Gbit/s or slower; fp16 and bf16 halve a float32 payload, rounding to nearest even
// (fp16: relative error at most 2^-11 for normal values, overflow to ±Inf beyond 65504; bf16:
// relative error at most 2^-8, same range as float32). NewMemJob applies the same rounding so
// that tests see what the network would deliver.
//
// # Stream endpoint
//
// One reader goroutine per connection decodes frames into per-channel FIFOs. When a Recv is
// already waiting for the next message of that (peer, channel) and the message fits, an
// uncompressed payload is read from the socket straight into the caller's buffer and an
// encoded one is decoded straight into it; otherwise the payload goes into a pooled buffer
// that the later Recv copies from. Payload checksums are computed chunk by chunk as the bytes
// arrive, while they are still in cache. Send writes header and payload
// with one vectored write (writev) on a net.Conn, under a per-connection lock, and returns when
// the payload may be reused. Steady-state Send and Recv allocate nothing.
//
// Lent payloads (transport/shm pipes, payloads of StreamOptions.LendMin bytes or more, 256 KiB
// by default): when a RecvBorrow waits for the next message of its (peer, channel), an
// uncompressed payload of at most half the pipe's ring is not copied out at all: the pipe
// lends it in place, RecvBorrow returns the ring's bytes, and the producer does not write over
// them until ReleaseBorrowed. A collective thus reduces a segment where the sender wrote it
// (copy in, reduce) instead of copying it out first (copy in, copy out, reduce). The endpoint
// reads such a frame from the pipe itself, recognised by its header while the read buffer is
// empty, and drains the read buffer at the end of every payload, so that the read buffer never
// holds the start of a lendable payload; smaller frames go through the read buffer as on a
// socket. A lent payload that ends up queued with nobody waiting (its receiver gave up) is
// copied into a pooled buffer as soon as the reader would need its room, so a queued message
// never holds the producer back.
//
// Polling (StreamOptions.Poll, on sockets on Linux and on transport/shm pipes): a Recv that finds nothing queued polls the
// socket for a bounded time before it sleeps, yielding the CPU between looks, and reads every
// frame that has wholly arrived itself, as an MPI progress loop does. The reader goroutine then
// waits for data without holding the read side (a per-connection token) and takes the token
// only to read a frame. This takes the two thread wake-ups of a sleeping receiver (the reader,
// then the receiver) off a small message's path; they cost tens of microseconds each on a
// loaded or virtualized host.
//
// Contexts: a cancelled Recv returns at once; if the reader was filling its buffer at that
// moment, the read is interrupted with a read deadline (or, on a connection without deadlines,
// by closing it) and the message is kept for the next Recv. Send honours the context's
// deadline as a write deadline; a context that can be cancelled but has no deadline interrupts
// the write when cancelled (that path allocates). A Send that fails after part of a frame went
// out closes the connection, since the stream can no longer be parsed.
//
// This package must never import collective or anything above it, keep global mutable state,
// or panic on bytes that come from the network.
package transport
