package trainer

import (
	"context"
	"fmt"
	"runtime"

	"github.com/hetsync/hetsync/collective/kv"
)

// wbspOpt is WBSP-optimized ("pcc", docs/algorithms.md#wbsp-optimized) in its parameter-server
// form, for --collective ps (every other collective runs wbspOptAllReduce,
// wbsp_opt_allreduce.go): WBSP's server and trigger, with the
// uploads overlapping computation. A goroutine (the uploader) does each push/pull while the
// worker computes its next steps; the worker never waits for an upload. Deltas are
// double-buffered so that no local update is ever lost or counted twice (the original's race
// is gone):
//
//   - pending holds the sum of the local deltas not yet handed to the uploader; inflight the
//     deltas of the upload in progress.
//   - At each step boundary the worker adds its step's delta to pending. If the uploader is
//     idle, the worker takes its result: for every shard that came back with a newer global
//     model G, the local model becomes G + pending (the deltas computed while the upload was in
//     flight are re-based onto the new model, and still uploaded); then pending is handed over
//     as the next upload.
//   - New global models are thus applied only at step boundaries, never in the middle of a
//     step. When a reply says training stops, the worker uploads what is still pending,
//     synchronously, and stops.
//
// Compute is the local step including its SGD update; Comm is the rest of the round on the
// worker's goroutine: delta bookkeeping, rebasing onto new global models, the final flush.
//
// A round is one step boundary of this rank (its embedded psClient says so: Asynchronous,
// RanOver), so a caller's loop drives it as a Session under ExchangeParams: its optimizer
// steps its copy, and each Sync is the boundary's bookkeeping, which may re-base the
// parameters onto a new global model.
func wbspOptFactory() Factory {
	return Factory{
		Options:    func() Options { return &WBSPOptions{} },
		New:        wbspNew(func() Strategy { return &wbspOpt{} }, func() Strategy { return &wbspOptAllReduce{} }),
		Compresses: true, // over an allreduce; the parameter server's form refuses (UncompressedRounds)
	}
}

type wbspOpt struct {
	psClient
	prev  []float32
	delta []float32
	pipe  *deltaPipeline

	reqs   chan wbspUpload
	done   chan wbspUploaded
	exited chan struct{}
	busy   bool
	stop   bool
	last   kv.Reply
	// sent is the clock of the upload in flight; lastSent that of the upload whose reply is
	// last. The steps since lastSent are in no reply yet but count toward the job's progress.
	sent, lastSent uint64

	// onDelta, when set (tests), sees every computed step delta (uploaded=false) and every
	// uploaded vector (uploaded=true).
	onDelta func(uploaded bool, d []float32)
}

type wbspUpload struct {
	clock uint64
	vote  bool
}

type wbspUploaded struct {
	rep kv.Reply
	err error
}

// deltaPipeline is WBSP-optimized's double buffer of local deltas. It holds no I/O: the
// strategy and its tests drive it.
type deltaPipeline struct {
	pending  []float32 // Σ local deltas not handed to the uploader yet
	inflight []float32 // the upload in progress
	global   []float32 // where the uploader receives new global shards
	empty    bool      // pending holds stale values that count as zero (saves clearing it)
}

func newDeltaPipeline(n int) *deltaPipeline {
	return &deltaPipeline{pending: make([]float32, n), inflight: make([]float32, n), global: make([]float32, n)}
}

// addStep records the step that took prev to params, in one pass: pending += params − prev,
// prev = params, and delta = params − prev unless delta is nil.
func (p *deltaPipeline) addStep(delta, params, prev []float32) {
	prev, q := prev[:len(params)], p.pending[:len(params)]
	if delta == nil {
		if p.empty {
			p.empty = false
			for i, v := range params {
				q[i], prev[i] = v-prev[i], v
			}
			return
		}
		for i, v := range params {
			q[i] += v - prev[i]
			prev[i] = v
		}
		return
	}
	delta = delta[:len(params)]
	if p.empty {
		p.empty = false
		for i, v := range params {
			d := v - prev[i]
			delta[i], q[i], prev[i] = d, d, v
		}
		return
	}
	for i, v := range params {
		d := v - prev[i]
		delta[i] = d
		q[i] += d
		prev[i] = v
	}
}

// handoff makes the pending deltas the next upload and starts a new, empty pending sum. It
// returns the vector to upload; the caller must not call it while an upload is in flight.
func (p *deltaPipeline) handoff() []float32 {
	if p.empty {
		clear(p.pending) // nothing was added since the last handoff: upload zeros
	}
	p.pending, p.inflight = p.inflight, p.pending
	p.empty = true
	return p.inflight
}

// rebase sets local[lo:hi] to the new global values plus the deltas not uploaded yet.
func (p *deltaPipeline) rebase(local []float32, lo, hi int) {
	g, l := p.global[lo:hi], local[lo:hi]
	if p.empty {
		copy(l, g)
		return
	}
	q := p.pending[lo:hi]
	for i := range l {
		l[i] = g[i] + q[i]
	}
}

func (s *wbspOpt) Name() string { return "wbsp-opt" }

// UncompressedRounds: the parameter server's pushes and pulls are not allreduces.
func (s *wbspOpt) UncompressedRounds() string {
	return "its rounds are pushes to and pulls from the parameter server; --collective ring or auto runs its rounds as compressed allreduces"
}

func (s *wbspOpt) Start(ctx context.Context, w *Worker) error {
	n := len(w.Params)
	s.prev, s.delta, s.pipe = make([]float32, n), make([]float32, n), newDeltaPipeline(n)
	rule, err := wbspRule(w.Cfg, "wbsp-opt")
	if err != nil {
		return err
	}
	svc, err := startPS(ctx, w, "wbsp-opt", rule, nil)
	if err != nil {
		return err
	}
	s.svc = svc
	copy(s.prev, w.Params)
	s.reqs, s.done, s.exited = make(chan wbspUpload, 1), make(chan wbspUploaded, 1), make(chan struct{})
	go s.upload(ctx)
	return nil
}

// upload is the uploader goroutine: it pushes the in-flight deltas and receives the shards
// published since this worker's last pull into the pipeline's global buffer.
func (s *wbspOpt) upload(ctx context.Context) {
	defer close(s.exited)
	for u := range s.reqs {
		rep, err := s.svc.PushPullIfNewer(ctx, s.pipe.inflight, s.pipe.global, u.clock, u.vote)
		s.done <- wbspUploaded{rep: rep, err: err}
	}
}

// received applies an upload's result at a step boundary.
func (s *wbspOpt) received(w *Worker, r wbspUploaded) error {
	s.busy = false
	if r.err != nil {
		return fmt.Errorf("trainer: rank %d: wbsp-opt upload: %w", w.Rank, r.err)
	}
	s.last, s.lastSent = r.rep, s.sent
	s.stop = s.stop || r.rep.Stop
	if r.rep.Fresh == 0 {
		return nil
	}
	for i := range s.svc.Servers() {
		if s.svc.Fresh(i) {
			lo, hi := s.svc.ShardRange(i)
			s.pipe.rebase(w.Params, lo, hi)
			copy(s.prev[lo:hi], w.Params[lo:hi])
		}
	}
	return nil
}

// Round is one local step and its boundary (StepRound).
func (s *wbspOpt) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: the worker's optimizer steps its own copy; a boundary may re-base it onto a new
// global model.
func (s *wbspOpt) Exchange() Exchange { return ExchangeParams }

// localStep is WBSP's own step in the built-in loop (wbspStep): its step time counts the
// update as computation.
func (s *wbspOpt) localStep(ctx context.Context, w *Worker) (StepReport, error) {
	return wbspStep(ctx, w)
}

// Sync is a step boundary: the step's change joins the pending deltas, a finished upload's
// global model is applied, and the pending deltas are handed to the uploader when it is idle
// (synchronously, and for the last time, once the stop is known).
func (s *wbspOpt) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	t1 := w.Now()
	if s.onDelta != nil {
		s.pipe.addStep(s.delta, w.Params, s.prev)
		s.onDelta(false, s.delta)
	} else {
		s.pipe.addStep(nil, w.Params, s.prev)
	}
	s.clock++
	if s.busy {
		if stopVote {
			// Rank 0 votes to stop: the vote rides on the next upload, so wait for the one in
			// flight instead of computing past the bound while it is out.
			if err := s.received(w, <-s.done); err != nil {
				return RoundStats{}, err
			}
		} else {
			select {
			case r := <-s.done:
				if err := s.received(w, r); err != nil {
					return RoundStats{}, err
				}
			default:
				// Still uploading. A step of a small model takes microseconds, far less than
				// the scheduler's time slice, and this loop never blocks: yield, so that the
				// uploader is not starved where goroutines outnumber cores.
				runtime.Gosched()
			}
		}
	}
	stopNow := false
	if !s.busy {
		up := s.pipe.handoff()
		if s.onDelta != nil {
			s.onDelta(true, up)
		}
		s.sent = s.clock
		if s.stop {
			// The last upload: what is still pending, synchronously.
			rep, err := s.svc.PushPullIfNewer(ctx, up, s.pipe.global, s.clock, stopVote)
			if err := s.received(w, wbspUploaded{rep: rep, err: err}); err != nil {
				return RoundStats{}, err
			}
			stopNow = true
		} else {
			s.busy = true
			s.reqs <- wbspUpload{clock: s.clock, vote: stopVote}
		}
	}
	// Comm: bookkeeping, rebasing and the final flush; the step's own upload is still out.
	rs := s.roundOf(kv.Reply{}, w.Now().Sub(t1))
	// The worker never waits for its uploads, so the last reply may be many steps old (an
	// uploader starved of CPU on a busy host): its own steps since count too, else rank 0
	// judges --max-rounds from a stale sum and runs far past it.
	progress := s.last
	progress.ClockSum += s.clock - s.lastSent
	psProgress(w, &rs, progress)
	rs.Stop = stopNow
	return rs, nil
}

func (s *wbspOpt) Finish(ctx context.Context, w *Worker) error {
	if s.svc == nil {
		return nil
	}
	var err error
	if s.busy {
		select {
		case r := <-s.done:
			s.busy = false
			if r.err != nil {
				err = r.err
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	close(s.reqs)
	if !s.busy {
		<-s.exited
	}
	if cerr := s.svc.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *wbspOpt) NoCheckpoint() string {
	return "the global model and the uploads in flight live on the parameter-server ranks, and every worker has its own unsent deltas"
}
