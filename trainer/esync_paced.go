package trainer

// ESync with rounds paced by the network (ESyncConfig.Paced, --esync-paced, with
// --esync-overlap; docs/algorithms.md#overlapping-rounds). Under overlap alone a rank hands
// over when the state service says READY, which comes once the slowest rank has taken about
// one step; where an exchange takes several steps' time (a compressed model over a thin
// link) the rank then waits at its next handover for most of the exchange. Paced, a rank
// instead keeps stepping until the exchange in flight has completed and hands over at the
// first step's end after that, so the wait at the handover is only the applying.
//
// The rule: at least one local step (StepRound asks only after a step), then hand over as
// soon as nothing is in flight. A round with nothing in flight, the first one and the one
// after a checkpoint landed the exchange, thus hands over after one step: there is no
// exchange to hide, and asking READY instead would need the state service, its round
// bookkeeping and its handshake for one round, for no gain in the time overlapped. The state
// service is not started at all, so nothing can wait on it.
//
// The replicas stay bitwise identical: only each rank's count of local steps in a round
// depends on when its exchange completes, and every rank applies the same summed vectors to
// the same global model in the same order (esync_overlap.go). Every round ends on every rank,
// since an exchange completes once every rank has issued it, and each rank issues round t's
// at its handover t, which needs only round t−1's exchange, issued by all.

// flightLanded says whether this rank's round may end under pacing: the exchange in flight,
// if any, has completed. It never blocks. A failed exchange counts as completed: the
// handover's land reports its error, with the rank and round.
func (s *esync) flightLanded() bool {
	if s.flight.req == nil {
		return true
	}
	done, _ := s.flight.req.Test()
	return done
}
