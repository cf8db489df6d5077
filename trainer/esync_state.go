package trainer

import "time"

// esyncState is ESync's state server (paper Alg. 2, SimpleStateServer/server/views.py) as a
// pure, deterministic state machine: no I/O, no clock. The caller passes every time in: te
// and now are instants on ONE clock (the state service's, on rank 0), c is a duration. The
// number of local steps n_i of a round is implicit: it is the number of NOT-READY answers a
// rank gets before its first READY.
//
// The predicates are those of the original, judged in the asking rank's round:
//
//   - query(r, k, c, te): store k, c, te in r's record; if k == 0, NOT-READY (every rank
//     takes at least one local step). The slowest rank s is the one with the largest last
//     step time c (ties to the lowest rank). Let t be r's round (the last it reset into). If
//     s has not yet reset into t, NOT-READY. rest = te_s + c_s − now predicts when s
//     finishes its current step. READY (and r is flagged ready in t) when r == s, or s is
//     ready in t (flagged so, or already past t), or c_r + ε > rest.
//   - reset(r, T', te): r's round = T' and te = te; T, the latest round any rank reset
//     into, becomes T' when T' is later (the first rank through round T'−1's update).
//
// The original judges every query in T and clears every flag when T changes, which is the
// same thing as long as no rank resets into T+1 before every rank is READY in T: with
// blocking rounds none can, as a rank resets only after the round's allreduce, which needs
// every rank's vector. With overlapping rounds (esync_overlap.go) a fast rank resets as soon
// as it hands its vector over, while a slower rank may still be stepping in T; judged in
// T+1, the slower rank, once the slowest, would wait for itself to reset into T+1, and
// everyone for it: a hang. Judged in its own round, it is READY as the original would have
// made it, and the ready flags are kept per round (ready holds the round) so that a reset
// into T+1 does not clear a flag that ranks still in T rely on. A rank's reset and its
// queries travel in order on one stream, so a query's round is its record's.
//
// ε is either fixed (the original's 0.5 s) or, when epsilon is 0, epsFactor × the median of
// the ranks' last step times (those that have reported one): 0.5 s is far longer than a
// millisecond-scale step and would stop every fast rank early.
type esyncState struct {
	round     int           // T, the latest round a rank reset into (starts at 1)
	epsilon   time.Duration // fixed ε; 0 selects epsFactor × median step time
	epsFactor float64
	recs      []esyncRecord
	scratch   []time.Duration // median buffer, reused
}

// esyncRecord is one rank's record.
type esyncRecord struct {
	k     int           // local steps taken this round
	c     time.Duration // duration of the last local step
	te    time.Duration // end of the last local step or reset, on the service's clock
	ready int           // the last round this rank was answered READY in; 0: none
	round int           // the last round this rank reset into
}

// newESyncState is init(num_workers, ε): T = 1 and every record cleared (round 1).
func newESyncState(size int, epsilon time.Duration, epsFactor float64) *esyncState {
	s := &esyncState{round: 1, epsilon: epsilon, epsFactor: epsFactor,
		recs: make([]esyncRecord, size), scratch: make([]time.Duration, 0, size)}
	for i := range s.recs {
		s.recs[i].round = 1
	}
	return s
}

// slowest is argmax_j c_j with ties to the lowest rank.
func (s *esyncState) slowest() int {
	best := 0
	for j := range s.recs {
		if s.recs[j].c > s.recs[best].c {
			best = j
		}
	}
	return best
}

// eps is the ε in force: fixed, or epsFactor × the median of the reported step times.
func (s *esyncState) eps() time.Duration {
	if s.epsilon > 0 {
		return s.epsilon
	}
	s.scratch = s.scratch[:0]
	for _, r := range s.recs {
		if r.c > 0 {
			s.scratch = append(s.scratch, r.c)
		}
	}
	return time.Duration(s.epsFactor * float64(medianDuration(s.scratch)))
}

// query is apply(r, k, c, te) at instant now, in r's round; it reports READY.
func (s *esyncState) query(r, k int, c, te, now time.Duration) bool {
	rec := &s.recs[r]
	rec.k, rec.c, rec.te = k, c, te
	if k == 0 {
		return false
	}
	t := rec.round
	sl := s.slowest()
	srec := &s.recs[sl]
	if srec.round < t {
		return false
	}
	rest := srec.te + srec.c - now
	if r == sl || srec.round > t || srec.ready == t || c+s.eps() > rest {
		rec.ready = t
		return true
	}
	return false
}

// reset is reset(r, T', te).
func (s *esyncState) reset(r, round int, te time.Duration) {
	s.round = max(s.round, round)
	rec := &s.recs[r]
	rec.round, rec.te, rec.k = round, te, 0
}
