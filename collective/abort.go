package collective

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// A rank that gives up on a call tells every peer why before it sends the abort notice: one
// message on a channel of its own of the job's endpoint, whose header names the call (Seq, and
// in Segment the channel of the communicator) and the job rank that gave up first (Op), with
// that rank's own error as the payload. A rank that gives up because a peer aborted passes the
// first rank's reason on unchanged, so that however far the aborts travel, every rank reports
// the rank that failed first and why, not the neighbour that told it. The reason goes first
// on the same connection as the notice, so it is queued by the time the notice is read.

// abortReasonMax bounds the reason's payload; a longer error is cut.
const abortReasonMax = 2048

// abortReasonWait is how long a rank that received an abort notice looks for its reason.
const abortReasonWait = 200 * time.Millisecond

// abortChannel is the channel of the communicator's collectives on the job's endpoint.
func (c *Comm) abortChannel() transport.Channel {
	if e, ok := c.ep.(subChanneler); ok {
		return e.channel()
	}
	return chanCollective
}

// abortReason is what this rank sends its peers when it gives up on a call with err: the job
// rank that gave up first and its error.
func (c *Comm) abortReason(err error) (first int, reason string) {
	var pa *PeerAbortedError
	if errors.As(err, &pa) && pa.Reason != "" {
		return pa.First, pa.Reason
	}
	reason = err.Error()
	if len(reason) > abortReasonMax {
		reason = reason[:abortReasonMax]
	}
	return c.jobRank(c.Rank()), reason
}

// tellAbortReason sends peer r the reason this rank gave up on call seq (best effort).
func (c *Comm) tellAbortReason(ctx context.Context, r int, seq uint64, first int, reason []byte) {
	h := transport.Header{Channel: chanAbort, Seq: seq, Segment: uint32(c.abortChannel()), Op: uint32(first)}
	_ = c.base.Send(ctx, c.jobRank(r), h, reason)
}

// peerAborted is the error of a call whose peer `from` sent an abort notice for call seq, with
// the reason that peer sent before it.
func (c *Comm) peerAborted(from int, seq uint64) *PeerAbortedError {
	e := &PeerAbortedError{Rank: c.Rank(), Peer: from, Seq: seq, First: -1}
	ctx, cancel := context.WithTimeout(context.Background(), abortReasonWait)
	defer cancel()
	buf := make([]byte, abortReasonMax)
	// Reasons of earlier communicators or calls may be queued before this one: skip them.
	for range 16 {
		h, n, err := c.base.RecvAny(ctx, c.jobRank(from), chanAbort, buf)
		if err != nil {
			return e
		}
		if h.Seq == seq && h.Segment == uint32(c.abortChannel()) {
			e.First, e.Reason = int(h.Op), string(buf[:n])
			return e
		}
	}
	return e
}

// PeerAbortedError says that a peer gave up on a call (its own error says why: a mismatch it
// saw, a timeout, its context, a failed link, an unresponsive rank) and told this rank so
// instead of letting it wait. It is not a mismatch: nobody need have called the wrong
// collective.
type PeerAbortedError struct {
	Rank, Peer int
	Seq        uint64 // the sequence number of the call the peer gave up on
	// First is the job rank that gave up first and Reason its own error, as the peer passed
	// them on; First is -1 and Reason empty when the peer's reason did not arrive.
	First  int
	Reason string
}

func (e *PeerAbortedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("rank %d gave up on call #%d and told rank %d to stop waiting (rank %d's own error says why)",
			e.Peer, e.Seq, e.Rank, e.Peer)
	}
	return fmt.Sprintf("rank %d gave up on call #%d and told rank %d to stop waiting; the first to give up was job rank %d: %s",
		e.Peer, e.Seq, e.Rank, e.First, e.Reason)
}
