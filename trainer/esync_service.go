package trainer

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// esyncService is ESync's state service, a service (package service) of the job's endpoint.
// Rank 0 hosts the state machine (esyncState) and serves the other ranks; its own queries go
// straight to the state machine under the same lock.
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
// Messages: a query is a request (Arg the round, Aux k, Body c in nanoseconds, 8 bytes)
// whose reply's flags say READY and whether the asking rank is the slowest; a reset is a
// one-way message (Arg the round, Body c). Each rank has at most one query in flight.
type esyncService struct {
	svc   *service.Service
	rank  int
	start time.Time

	// rank 0
	mu sync.Mutex
	sm *esyncState

	// other ranks: the query in flight, so that a rank can go on computing while it is
	// (Ask, then Answers or Answer).
	req     [8]byte
	pending service.Msg // the query in flight, when asking
	asking  bool
	slowest bool // the last answer named this rank the slowest
}

// esyncAnswer is rank 0's reply to a query: READY or not, and whether the asking rank was
// the slowest (the largest last step time) when the service decided.
type esyncAnswer struct {
	ready   bool
	slowest bool
}

// The state service's name, its operations and its reply's flags.
const (
	esyncServiceName = "esync-state"

	esyncQuery uint8 = 0
	esyncReset uint8 = 1

	esyncReady uint8 = 1 << 0
	esyncSlow  uint8 = 1 << 1 // the asking rank is the slowest
)

func esyncOps() []string { return []string{"query", "reset"} }

// startESyncService starts the service on this rank; every rank calls it.
func startESyncService(ctx context.Context, ep transport.Endpoint, epsilon time.Duration, epsFactor float64) (*esyncService, error) {
	s := &esyncService{rank: ep.Rank(), start: time.Now()}
	spec := service.Spec{Name: esyncServiceName, Ops: esyncOps(), MaxBody: 8}
	if s.rank == 0 {
		s.sm = newESyncState(ep.Size(), epsilon, epsFactor)
		spec.Handler = s
		for r := 1; r < ep.Size(); r++ {
			spec.Clients = append(spec.Clients, r)
		}
	} else {
		spec.Servers = []int{0}
	}
	svc, err := service.Start(ctx, ep, spec)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: esync: %w", s.rank, err)
	}
	s.svc = svc
	return s, nil
}

func (s *esyncService) now() time.Duration { return time.Since(s.start) }

// Serve answers a query, or applies a reset, of rank r.Peer (rank 0).
func (s *esyncService) Serve(ctx context.Context, svc *service.Service, r service.Request) error {
	ok := r.Op == esyncQuery && !r.OneWay || r.Op == esyncReset && r.OneWay
	if !ok || len(r.Body) != 8 {
		return fmt.Errorf("unexpected message (op %d, one-way %v, %d bytes): want a query or a one-way reset carrying 8 bytes", r.Op, r.OneWay, len(r.Body))
	}
	c := time.Duration(binary.LittleEndian.Uint64(r.Body))
	if r.Op == esyncReset {
		s.resetAndQuery(r.Peer, int(r.Arg), c)
		return nil
	}
	s.mu.Lock()
	now := s.now()
	ready := s.sm.query(r.Peer, int(r.Aux), c, now, now)
	slowest := s.sm.slowest() == r.Peer
	s.mu.Unlock()
	m := service.Msg{Op: esyncQuery, Arg: r.Arg, Aux: r.Aux}
	if ready {
		m.Flags |= esyncReady
	}
	if slowest {
		m.Flags |= esyncSlow
	}
	return svc.Reply(ctx, r.Peer, m)
}

// Query asks whether this rank is READY for the global update of round, having taken k local
// steps this round, the last of which took c; it waits for the answer.
func (s *esyncService) Query(ctx context.Context, round, k int, c time.Duration) (bool, error) {
	if s.rank == 0 {
		if err := s.svc.Err(); err != nil {
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
	if s.asking {
		return fmt.Errorf("trainer: rank %d: esync query (round %d, k=%d) while k=%d is unanswered", s.rank, round, k, s.pending.Aux)
	}
	binary.LittleEndian.PutUint64(s.req[:], uint64(c))
	m := service.Msg{Op: esyncQuery, Arg: uint64(round), Aux: uint32(k), Body: s.req[:]}
	if err := s.svc.Ask(ctx, 0, m); err != nil {
		return fmt.Errorf("trainer: rank %d: esync query (round %d, k=%d): %w", s.rank, round, k, err)
	}
	s.pending, s.asking = m, true
	return nil
}

// Answers delivers the answer to the query in flight; pass what it delivers to Check.
func (s *esyncService) Answers() <-chan service.Reply { return s.svc.Replies(0) }

// Check verifies that r, received from Answers, answers the query in flight, which it ends,
// and records whether it named this rank the slowest.
func (s *esyncService) Check(r service.Reply) (esyncAnswer, error) {
	defer r.Release()
	m, asking := s.pending, s.asking
	s.asking = false
	switch {
	case r.Err != nil:
		return esyncAnswer{}, r.Err
	case !asking:
		return esyncAnswer{}, fmt.Errorf("trainer: rank %d: esync reply from rank 0 with no query in flight (round %d, k=%d)", s.rank, r.Arg, r.Aux)
	case r.Arg != m.Arg || r.Aux != m.Aux:
		return esyncAnswer{}, fmt.Errorf("trainer: rank %d: esync reply from rank 0 does not answer round %d, k=%d (got round %d, k=%d)", s.rank, m.Arg, m.Aux, r.Arg, r.Aux)
	}
	a := esyncAnswer{ready: r.Flags&esyncReady != 0, slowest: r.Flags&esyncSlow != 0}
	s.slowest = a.slowest
	return a, nil
}

// Answer waits for the answer to the query in flight.
func (s *esyncService) Answer(ctx context.Context) (esyncAnswer, error) {
	r, err := s.svc.Wait(ctx, 0)
	if err != nil {
		s.asking = false
		return esyncAnswer{}, fmt.Errorf("trainer: rank %d: waiting for rank 0's esync reply: %w", s.rank, err)
	}
	return s.Check(r)
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
	if err := s.svc.Post(ctx, 0, service.Msg{Op: esyncReset, Arg: uint64(round), Body: s.req[:]}); err != nil {
		return fmt.Errorf("trainer: rank %d: esync reset (round %d): %w", s.rank, round, err)
	}
	return nil
}

// Close ends the service: other ranks say bye; rank 0 waits until every peer has.
func (s *esyncService) Close(ctx context.Context) error { return s.svc.Close(ctx) }

// Abort ends the service at once, for a failed run whose peers may never say bye.
func (s *esyncService) Abort() { s.svc.Abort() }
