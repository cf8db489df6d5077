package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Channel separates independent conversations between the same pair of ranks. Each channel has
// its own FIFO per peer, so that one conversation never steals another's message. The
// transport gives no channel a meaning: collective.Comm declares its own, and the service
// layer (package service) hands out the others by name.
type Channel uint16

// Header identifies a message. The sender sets every field; the receiver states which Seq, Op
// and Segment it expects and Recv fails with a *MismatchError when the frame carries others.
type Header struct {
	Channel Channel
	// Codec asks the transport to encode the payload on the wire (see Codec). The receiver
	// always gets the decoded bytes back.
	Codec Codec
	// Seq is the collective's sequence number on this communicator.
	Seq uint64
	// Op is the op signature: which collective, algorithm, dtype, reduction and count.
	Op uint32
	// Segment is the index of this message within the collective.
	Segment uint32
}

func (h Header) String() string {
	return fmt.Sprintf("chan=%d seq=%d op=%#08x seg=%d", h.Channel, h.Seq, h.Op, h.Segment)
}

// Stats counts traffic through an endpoint since it was created. Bytes are payload bytes
// before encoding (what the caller handed over), WireBytes what went on the wire.
type Stats struct {
	MsgsSent, MsgsRecv           uint64
	BytesSent, BytesRecv         uint64
	WireBytesSent, WireBytesRecv uint64
}

// Endpoint is one rank's view of the job. Send and Recv may be called concurrently for
// different peers and channels; at most one goroutine may Recv from a given (peer, channel) at
// a time. A rank may send to itself.
type Endpoint interface {
	// Rank is this endpoint's rank in [0, Size()).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Send delivers payload to rank `to`. It returns when payload may be reused; it does not
	// wait for the peer to receive it.
	Send(ctx context.Context, to int, h Header, payload []byte) error
	// Recv receives the next message from rank `from` on channel want.Channel into buf and
	// returns its length. The message's Seq, Op and Segment must equal want's (else
	// *MismatchError) and it must fit in buf (else an error naming both ranks).
	Recv(ctx context.Context, from int, want Header, buf []byte) (int, error)
	// RecvAny receives the next message from `from` on channel ch whatever its Seq, Op and
	// Segment, and returns its header and length. Services with their own protocol use it.
	RecvAny(ctx context.Context, from int, ch Channel, buf []byte) (Header, int, error)
	// Stats reports the traffic so far.
	Stats() Stats
	// Close releases the endpoint. Blocked calls return an error.
	Close() error
}

// HostLocality is implemented by endpoints that know which ranks provably share this rank's
// host. The in-process endpoint puts every rank on one host; the p2p endpoint proves it (both
// ranks see one shared-memory file and sit in one network namespace, see transport/p2p).
type HostLocality interface {
	// SameHost reports, for every rank of the job, whether this rank proved that the rank runs
	// on its host. SameHost()[Rank()] is true. The caller may not modify the slice.
	SameHost() []bool
}

// SameHost is the HostLocality answer of ep or of the first endpoint under its decorators that
// has one (As), or, for an endpoint that cannot tell, a row in which every rank but ep's own
// is on another host: a shared host is never assumed.
func SameHost(ep Endpoint) []bool {
	if l, ok := As[HostLocality](ep); ok {
		if row := l.SameHost(); len(row) == ep.Size() {
			return row
		}
	}
	row := make([]bool, ep.Size())
	row[ep.Rank()] = true
	return row
}

// LargeSegmenter is implemented by endpoints whose links favour larger messages for large
// collectives: LargeSegmentBytes is the segment size a collective should cut a large buffer
// into when the caller chose none, 0 when the endpoint has no preference. Plain TCP
// connections do (every message costs wake-ups and a pass through the socket's send path);
// shared memory does not (its rings hold less than such a segment).
type LargeSegmenter interface {
	LargeSegmentBytes() int
}

// LargeSegment is the LargeSegmentBytes of ep, or of the first endpoint under its decorators
// that has one (As); 0 when none has.
func LargeSegment(ep Endpoint) int {
	if l, ok := As[LargeSegmenter](ep); ok {
		return l.LargeSegmentBytes()
	}
	return 0
}

// MismatchError says that a peer sent a different message from the one this rank expected:
// the two ranks are running different collectives, or the same one with other arguments.
type MismatchError struct {
	Rank, Peer int
	Want, Got  Header
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rank %d: message from rank %d does not match: expected %v, got %v "+
		"(the ranks called different collectives or the same one with different arguments)",
		e.Rank, e.Peer, e.Want, e.Got)
}

// CheckHeader returns a *MismatchError when got is not the message want describes.
func CheckHeader(rank, peer int, want, got Header) error {
	if want.Channel != got.Channel || want.Seq != got.Seq || want.Op != got.Op || want.Segment != got.Segment {
		return &MismatchError{Rank: rank, Peer: peer, Want: want, Got: got}
	}
	return nil
}

// PeerError wraps a failure with the local rank, the peer and what was being done.
type PeerError struct {
	Rank, Peer int
	Op         string // "send", "recv", "dial", ...
	Err        error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d: %s with rank %d: %v", e.Rank, e.Op, e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// checkPeer validates a peer rank against the job size.
func checkPeer(rank, size, peer int, op string) error {
	if peer < 0 || peer >= size {
		return &PeerError{Rank: rank, Peer: peer, Op: op,
			Err: fmt.Errorf("peer rank out of range [0, %d)", size)}
	}
	return nil
}

// Codec is how a payload travels on the wire. The receiver always gets the sender's bytes back,
// except for the lossy float casts, which round float32 payloads to 16 bits on the way.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = iota
	CodecS2         // klauspost/compress s2: fast, for compressible data
	CodecZstd       // klauspost/compress zstd: smaller, slower
	CodecFP16       // float32 payload sent as IEEE half precision (lossy)
	CodecBF16       // float32 payload sent as bfloat16 (lossy)
)

// CloseAll closes endpoints concurrently, as the ranks of a job do when it ends, and returns
// their errors joined. Network endpoints linger on Close until their peers have read what they
// sent (see NewStreamEndpoint), so closing one rank after another would wait on each.
func CloseAll(eps []Endpoint) error {
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		if ep == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ep.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
