package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective"
)

// ESync with overlapping rounds (ESyncConfig.Overlap, --esync-overlap;
// docs/algorithms.md#overlapping-rounds): a rank hands its round's vector to a non-blocking
// allreduce (compressed as Config.Compress says) and goes on taking local steps from its
// current model while the exchange is in flight. At its next handover it waits for that
// exchange if it is still running, applies it to the global model (through the outer
// optimizer when Config.Outer is set) and re-bases: w ← w_global + (w_local − w_sent), so the
// steps taken during the flight are kept and travel in the next round's vector, the
// one-round-delayed update of Streaming DiLoCo and of wbsp-opt.
//
// The global model, the summed vectors and the outer state are the same on every rank, so the
// global models stay bitwise identical; each rank's local model is the global one plus its own
// steps since its last handover. Every local step is in exactly one vector.
//
// Applying at the handover, not at the first step after the exchange completes, makes a
// round's result independent of when the network delivered it: the same steps and data give
// the same models (a one-rank run is a fixed sequence, a resumed run continues bitwise).
//
// The state service: a rank resets into round t+1 when it hands round t's vector over, since
// that is when its next local steps begin; the predicates are unchanged (they predict the end
// of the slowest rank's current step, which now begins at its handover rather than after the
// exchange). A fast rank thus enters round t+1 while slower ones still step in round t, which
// blocking rounds never allow: the service judges each query in its rank's own round
// (esyncState), or the slowest, still in t, would wait for itself to reset into t+1.
//
// Stopping: rank 0's vote rides on round t's vector and is learnt at round t+1's handover,
// where every rank sends its last vector blocking and ends with the same model, holding every
// step. GlobalRounds counts the rounds handed over (the one in flight included), so
// --max-rounds N runs N+1 rounds, the last one to flush.
//
// Metrics: Wait is the handover's wait for the previous round's exchange (the time overlap
// did not hide); Comm the handover's own work, the reset and the round's queries.
type esyncFlight struct {
	comm nonBlockingComm
	sent []float32           // the local model at the last handover (w_sent)
	req  *collective.Request // the last vector's allreduce; nil once applied
	stop bool                // the agreed stop, learnt from an applied round
	loss float64             // the applied round's mean training loss over the ranks
}

// newESyncFlight prepares overlapping rounds on w, whose communicator must run non-blocking
// allreduces.
func newESyncFlight(w *Worker) (*esyncFlight, error) {
	nb, ok := w.Comm.(nonBlockingComm)
	if !ok {
		return nil, fmt.Errorf("trainer: rank %d: esync --esync-overlap over --collective %s needs a communicator with non-blocking allreduces, got %T",
			w.Rank, w.Cfg.Collective, w.Comm)
	}
	return &esyncFlight{comm: nb, sent: append(make([]float32, 0, len(w.Params)), w.Params...)}, nil
}

// land waits for the vector in flight, if any, and applies it to the global model; it says
// whether there was one.
func (s *esync) land(ctx context.Context, w *Worker) (bool, error) {
	f := s.flight
	if f.req == nil {
		return false, nil
	}
	err := f.req.Wait(ctx)
	f.req = nil
	if err != nil {
		return false, fmt.Errorf("trainer: rank %d: esync round %d: allreduce: %w", w.Rank, s.rounds+1, err)
	}
	loss, stop := s.update(w)
	f.loss, f.stop = loss, f.stop || stop
	return true, nil
}

// handover ends a round under overlap: it applies the previous round's exchange, sends this
// round's steps (since the last handover) without waiting, or, once the stop is agreed,
// blocking, and resets into the next round at the state service.
func (s *esync) handover(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st := s.roundStats()
	st.GlobalLoss = -1
	f := s.flight
	t0 := w.Now()
	landed, err := s.land(ctx, w)
	if err != nil {
		return RoundStats{}, err
	}
	t1 := w.Now()
	if landed {
		st.GlobalLoss = f.loss
	}
	// This round's vector is the steps since the last handover; re-based onto the new global
	// model they make the local one, the anchor of the next round's steps.
	n := len(w.Params)
	for i, p := range w.Params {
		v := p - f.sent[i]
		s.buf[i] = v
		if landed {
			p = s.pre[i] + v
			w.Params[i] = p
		}
		f.sent[i] = p
	}
	s.fillExtras(n, st, stopVote)
	if f.stop {
		// Agreed to stop: the last vector blocking, so that the last models hold every step
		// and are identical.
		if err := s.reduce.allReduce(ctx, w.Comm, s.buf); err != nil {
			return RoundStats{}, fmt.Errorf("trainer: rank %d: esync final round %d: allreduce: %w", w.Rank, s.rounds+1, err)
		}
		st.GlobalLoss, _ = s.update(w)
		copy(w.Params, s.pre)
		st.Stop = true
	} else {
		req, err := s.reduce.iAllReduce(ctx, f.comm, s.buf)
		if err != nil {
			return RoundStats{}, fmt.Errorf("trainer: rank %d: esync round %d: %w", w.Rank, s.rounds+1, err)
		}
		f.req = req
	}
	s.round++
	if s.svc != nil { // nil when paced (esync_paced.go)
		if err := s.svc.Reset(ctx, s.round, s.lastC); err != nil {
			return RoundStats{}, err
		}
	}
	st.GlobalSamples = s.samples
	st.GlobalRounds = s.rounds
	if f.req != nil {
		st.GlobalRounds++
	}
	st.Wait = t1.Sub(t0)
	st.Comm = w.Now().Sub(t1) + s.query
	s.roundExtras(&st)
	s.clean = st.Stop
	return st, nil
}

// landForCheckpoint applies the exchange in flight before a checkpoint and re-bases, so that
// the checkpoint holds the global model and no exchange in flight: a run resumed from it
// continues bitwise as the run that wrote it. The wait is bounded by the communicator's own
// timeout (every rank issued the exchange, so it completes or fails).
func (s *esync) landForCheckpoint(w *Worker) error {
	landed, err := s.land(context.Background(), w)
	if landed {
		// w ← w_global + (w − w_sent), anchored at w_global, so steps since the handover
		// (none, at a round's end) would still travel in the next vector.
		sent := s.flight.sent
		for i, p := range w.Params {
			w.Params[i] = s.pre[i] + (p - sent[i])
		}
		copy(sent, s.pre)
	}
	return err
}

// GlobalModel is the model every rank holds the same, which evaluation takes: under overlap
// the ranks' own models are ahead of it by their steps since the last handover.
func (s *esync) GlobalModel() []float32 { return s.pre }
