package trainer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// esyncService is ESync's state service over the job's own transport (transport.ChanState).
// Rank 0 hosts the state machine (esyncState); it answers the other ranks from one goroutine
// per peer, and its own queries go straight to the state machine under the same lock.
//
// One clock: te and now are rank 0's monotonic clock (time since the service started). A
// remote query leaves right after the step it reports, so rank 0 stamps te at receipt: te lags
// the true end of the step by the one-way latency, which is also what the original's HTTP
// timings saw, and no wall clocks of different hosts are ever compared (docs/algorithms.md#the-state-service). Workers send
// only durations (c).
//
// A reset is followed at once by the next round's k = 0 query, whose answer is always
// NOT-READY (esyncState.query), so Reset carries that query's c and the service applies both
// in order: one one-way message instead of a message and a round trip, which took a round
// trip off every rank's round (the slowest's included) and leaves the predicates unchanged.
//
// Wire protocol (all frames on ChanState): a request's Header.Op is esyncMagic|op, Seq the
// round, Segment k; a query's and a reset's payload is c in nanoseconds (8 bytes), a bye's is
// empty. A reply's Op is esyncMagic|esyncReply (|esyncReady), echoing Seq and Segment. Each
// rank has at most one query in flight, so replies need no matching beyond the echo check.
type esyncService struct {
	ep    transport.Endpoint
	rank  int
	start time.Time

	// rank 0
	mu      sync.Mutex
	sm      *esyncState
	servers sync.WaitGroup
	cancel  context.CancelFunc
	errMu   sync.Mutex
	err     error

	// other ranks: a goroutine receives rank 0's replies into answers, so that a rank can
	// go on computing while its query is in flight (Ask, then Answers or Answer).
	req     [8]byte
	answers chan esyncAnswer
	pending *transport.Header // the query in flight, nil when none
	slowest bool              // the last answer named this rank the slowest
}

// esyncAnswer is rank 0's reply to a query: READY or not, and whether the asking rank was
// the slowest (the largest last step time) when the service decided.
type esyncAnswer struct {
	h       transport.Header
	ready   bool
	slowest bool
	err     error
}

const (
	esyncMagic uint32 = 0x45530000 // "ES"
	esyncQuery uint32 = 1
	esyncReset uint32 = 2
	esyncBye   uint32 = 3
	esyncReply uint32 = 1 << 8
	esyncReady uint32 = 1 << 9
	esyncSlow  uint32 = 1 << 10 // the asking rank is the slowest
	esyncOpMsk uint32 = 0xff
)

// startESyncService starts the service on this rank; every rank calls it.
func startESyncService(ctx context.Context, ep transport.Endpoint, epsilon time.Duration, epsFactor float64) *esyncService {
	s := &esyncService{ep: ep, rank: ep.Rank(), start: time.Now()}
	if s.rank != 0 {
		actx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		s.answers = make(chan esyncAnswer, 1)
		go s.receive(actx)
		return s
	}
	s.sm = newESyncState(ep.Size(), epsilon, epsFactor)
	sctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	for peer := 1; peer < ep.Size(); peer++ {
		s.servers.Add(1)
		go func() {
			defer s.servers.Done()
			if err := s.serve(sctx, peer); err != nil {
				s.fail(err)
			}
		}()
	}
	return s
}

func (s *esyncService) now() time.Duration { return time.Since(s.start) }

func (s *esyncService) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *esyncService) failed() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// serve answers one peer until it says bye.
func (s *esyncService) serve(ctx context.Context, peer int) error {
	var buf [8]byte
	for {
		h, n, err := s.ep.RecvAny(ctx, peer, transport.ChanState, buf[:])
		if err != nil {
			return fmt.Errorf("trainer: rank 0: esync state service: receiving from rank %d: %w", peer, err)
		}
		if h.Op&^esyncOpMsk != esyncMagic {
			return fmt.Errorf("trainer: rank 0: esync state service: rank %d sent a foreign frame (%v)", peer, h)
		}
		switch h.Op & esyncOpMsk {
		case esyncQuery:
			if n != 8 {
				return fmt.Errorf("trainer: rank 0: esync state service: query from rank %d has %d bytes, want 8", peer, n)
			}
			c := time.Duration(binary.LittleEndian.Uint64(buf[:]))
			s.mu.Lock()
			now := s.now()
			ready := s.sm.query(peer, int(h.Segment), c, now, now)
			slowest := s.sm.slowest() == peer
			s.mu.Unlock()
			rh := transport.Header{Channel: transport.ChanState, Op: esyncMagic | esyncReply, Seq: h.Seq, Segment: h.Segment}
			if ready {
				rh.Op |= esyncReady
			}
			if slowest {
				rh.Op |= esyncSlow
			}
			if err := s.ep.Send(ctx, peer, rh, nil); err != nil {
				return fmt.Errorf("trainer: rank 0: esync state service: replying to rank %d: %w", peer, err)
			}
		case esyncReset:
			if n != 8 {
				return fmt.Errorf("trainer: rank 0: esync state service: reset from rank %d has %d bytes, want 8", peer, n)
			}
			s.resetAndQuery(peer, int(h.Seq), time.Duration(binary.LittleEndian.Uint64(buf[:])))
		case esyncBye:
			return nil
		default:
			return fmt.Errorf("trainer: rank 0: esync state service: rank %d sent unknown op %#x", peer, h.Op)
		}
	}
}

// Query asks whether this rank is READY for the global update of round, having taken k local
// steps this round, the last of which took c; it waits for the answer.
func (s *esyncService) Query(ctx context.Context, round, k int, c time.Duration) (bool, error) {
	if s.rank == 0 {
		if err := s.failed(); err != nil {
			return false, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.now()
		return s.sm.query(0, k, c, now, now), nil
	}
	if err := s.Ask(ctx, round, k, c); err != nil {
		return false, err
	}
	a, err := s.Answer(ctx)
	return a.ready, err
}

// Ask sends a query (as Query) without waiting for its answer; ranks other than 0 only, one
// query in flight at a time. The answer comes on Answers, or from Answer.
func (s *esyncService) Ask(ctx context.Context, round, k int, c time.Duration) error {
	if s.pending != nil {
		return fmt.Errorf("trainer: rank %d: esync query (round %d, k=%d) while k=%d is unanswered", s.rank, round, k, s.pending.Segment)
	}
	binary.LittleEndian.PutUint64(s.req[:], uint64(c))
	h := transport.Header{Channel: transport.ChanState, Op: esyncMagic | esyncQuery, Seq: uint64(round), Segment: uint32(k)}
	if err := s.ep.Send(ctx, 0, h, s.req[:]); err != nil {
		return fmt.Errorf("trainer: rank %d: esync query to rank 0 (round %d, k=%d): %w", s.rank, round, k, err)
	}
	s.pending = &h
	return nil
}

// Answers delivers the answer to the query in flight; pass what it delivers to Check.
func (s *esyncService) Answers() <-chan esyncAnswer { return s.answers }

// Check verifies that a, received from Answers, answers the query in flight, which it ends,
// and records whether it named this rank the slowest.
func (s *esyncService) Check(a esyncAnswer) (esyncAnswer, error) {
	h := s.pending
	s.pending = nil
	switch {
	case a.err != nil:
		return a, a.err
	case h == nil:
		return a, fmt.Errorf("trainer: rank %d: esync reply from rank 0 with no query in flight (%v)", s.rank, a.h)
	case a.h.Seq != h.Seq || a.h.Segment != h.Segment:
		return a, fmt.Errorf("trainer: rank %d: esync reply from rank 0 does not answer round %d, k=%d (got %v)", s.rank, h.Seq, h.Segment, a.h)
	}
	s.slowest = a.slowest
	return a, nil
}

// Answer waits for the answer to the query in flight.
func (s *esyncService) Answer(ctx context.Context) (esyncAnswer, error) {
	select {
	case a := <-s.answers:
		return s.Check(a)
	case <-ctx.Done():
		return esyncAnswer{}, fmt.Errorf("trainer: rank %d: waiting for rank 0's esync reply: %w", s.rank, ctx.Err())
	}
}

// receive passes rank 0's replies to answers until ctx ends or the link fails; a failure is
// delivered as an answer's error.
func (s *esyncService) receive(ctx context.Context) {
	var buf [8]byte
	for {
		rh, _, err := s.ep.RecvAny(ctx, 0, transport.ChanState, buf[:])
		a := esyncAnswer{h: rh}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			a.err = fmt.Errorf("trainer: rank %d: esync reply from rank 0: %w", s.rank, err)
		case rh.Op&^(esyncReady|esyncSlow|esyncOpMsk) != esyncMagic|esyncReply:
			a.err = fmt.Errorf("trainer: rank %d: esync: rank 0 sent a frame that is not a reply (%v)", s.rank, rh)
		default:
			a.ready, a.slowest = rh.Op&esyncReady != 0, rh.Op&esyncSlow != 0
		}
		select {
		case s.answers <- a:
		case <-ctx.Done():
			return
		}
		if a.err != nil {
			return
		}
	}
}

// resetAndQuery applies, on rank 0, rank r's reset into round and the k = 0 query (last step
// time c) that the reset carries, in that order and at one instant.
func (s *esyncService) resetAndQuery(r, round int, c time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sm.reset(r, round, now)
	s.sm.query(r, 0, c, now, now)
}

// Reset tells the state service that this rank finished the global update and entered round,
// and makes round's first query (k = 0, last step time c), whose answer is NOT-READY.
func (s *esyncService) Reset(ctx context.Context, round int, c time.Duration) error {
	if s.rank == 0 {
		s.resetAndQuery(0, round, c)
		return nil
	}
	binary.LittleEndian.PutUint64(s.req[:], uint64(c))
	h := transport.Header{Channel: transport.ChanState, Op: esyncMagic | esyncReset, Seq: uint64(round)}
	if err := s.ep.Send(ctx, 0, h, s.req[:]); err != nil {
		return fmt.Errorf("trainer: rank %d: esync reset to rank 0 (round %d): %w", s.rank, round, err)
	}
	return nil
}

// Close ends the service: other ranks say bye; rank 0 waits until every peer has.
func (s *esyncService) Close(ctx context.Context) error {
	if s.rank != 0 {
		s.cancel()
		h := transport.Header{Channel: transport.ChanState, Op: esyncMagic | esyncBye}
		if err := s.ep.Send(ctx, 0, h, nil); err != nil {
			return fmt.Errorf("trainer: rank %d: esync bye to rank 0: %w", s.rank, err)
		}
		return nil
	}
	done := make(chan struct{})
	go func() { s.servers.Wait(); close(done) }()
	defer s.cancel()
	select {
	case <-done:
		return s.failed()
	case <-ctx.Done():
		return errors.Join(s.failed(), fmt.Errorf("trainer: rank 0: esync state service: waiting for the other ranks' bye: %w", ctx.Err()))
	}
}
