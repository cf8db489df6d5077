package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// RunSession is a Session with RunRank's run directory: rank 0 writes config.json when the
// session starts, every rank appends its rounds to the run directory's ranks/ as they end,
// rank 0 appends the evaluations its caller reports (Eval) to eval.jsonl, and Close gathers
// every rank's records to rank 0, which writes metrics.jsonl and summary.json. The directory
// is the one `hetsync train` writes, so `hetsync report` reads it, and a session that fails
// leaves what it measured, with a summary.json on rank 0 that says it ended early and why.
//
// Its Session's methods are RunSession's; ShouldSync, Sync and Close are wrapped to record.
type RunSession struct {
	*Session
	ep   transport.Endpoint
	live *liveRun
	dir  string // rank 0's run directory; "" when the session writes none
	ran  string // TrainOptions.DataPath, for summary.json

	// What the latest round ended with: an evaluation is of the model after it.
	last       metrics.RoundRecord
	rounds     int
	global     int
	samples    int64
	evals      []EvalResult // rank 0's, to mark its round records with their accuracy
	failed     error        // the first failed call: the run ended early
	closed     bool
	summary    *metrics.Summary
	afterRound func(*metrics.RoundRecord)
}

// NewRunSession starts a Session (see NewSession: the same Config, vectors and options) that
// writes the run directory opts.Out names on rank 0, with opts.Record as its config.json (nil
// records cfg) and opts.DataPath in its summary; the other ranks take rank 0's directory, as
// under RunRank. An empty Out on rank 0 writes nothing. Every rank of the job calls it. A
// directory rank 0 cannot create (one that already holds a run, say) fails the session on
// every rank, naming it. A session does not resume: ResumeDir is refused.
func NewRunSession(ctx context.Context, ep transport.Endpoint, cfg Config, params, grads []float32, opts TrainOptions) (*RunSession, error) {
	if ep == nil {
		return nil, errors.New("trainer: a session needs an endpoint")
	}
	rank := ep.Rank()
	if opts.ResumeDir != "" {
		return nil, fmt.Errorf("trainer: rank %d: TrainOptions.ResumeDir: a session does not resume from a checkpoint (its caller's loop owns the model)", rank)
	}
	r := &RunSession{ep: ep, ran: opts.DataPath, afterRound: opts.AfterRound, last: metrics.RoundRecord{Round: -1}}
	config := opts.Record
	if config == nil {
		config = cfg
	}
	var err, openErr error
	if rank == 0 {
		// Before the others learn the directory: one that rank 0 cannot create is every rank's
		// error, not rank 0's alone while the others wait for it at the start.
		r.live, openErr = openLiveRun(opts.Out, 0, config, false)
	}
	if r.dir, err = shareRunDir(ctx, ep, opts.Out, openErr); err != nil {
		if r.live != nil {
			r.live.close()
		}
		return nil, err
	}
	if rank != 0 {
		// Only rank 0's files can fail a run: another rank's are a copy (openLiveRun).
		r.live, _ = openLiveRun(r.dir, rank, nil, false)
	}
	sopts := opts
	sopts.Out, sopts.Record, sopts.DataPath = "", nil, ""
	sopts.AfterRound = r.round
	if r.Session, err = NewSession(ctx, ep, cfg, params, grads, sopts); err != nil {
		return nil, r.fail(ctx, err)
	}
	return r, nil
}

// round records one of this rank's round records as its round ends.
func (r *RunSession) round(rec *metrics.RoundRecord) {
	r.live.round(rec)
	r.last = *rec
	if r.afterRound != nil {
		r.afterRound(rec)
	}
}

// Dir is the run directory the session writes (rank 0's path, on every rank); "" when none.
func (r *RunSession) Dir() string { return r.dir }

// ShouldSync is Session's; a failure ends the run early.
func (r *RunSession) ShouldSync(ctx context.Context) (bool, error) {
	ok, err := r.Session.ShouldSync(ctx)
	r.keep(err)
	return ok, err
}

// Sync is Session's. On rank 0 a record the run directory could not take (a full disk) stops
// the job after this round, as Train stops on it, and Close then fails naming the file.
func (r *RunSession) Sync(ctx context.Context) (RoundStats, error) {
	if r.live.err() != nil {
		r.Session.Stop()
	}
	st, err := r.Session.Sync(ctx)
	if err != nil {
		r.keep(err)
		return st, err
	}
	r.rounds++
	r.global, r.samples = st.GlobalRounds, st.GlobalSamples
	return st, nil
}

func (r *RunSession) keep(err error) {
	if err != nil && r.failed == nil {
		r.failed = err
	}
}

// Eval records rank 0's evaluation of the model after its latest round (the caller's test
// accuracy, a fraction in [0, 1], and loss; NaN for none) in eval.jsonl, at that round's
// training time: the clock of summary.json's time to accuracy, as Train's evaluations are.
// Evaluations are the global model's, which rank 0 holds: other ranks' are refused. Without
// a run directory it records nothing.
func (r *RunSession) Eval(acc, loss float64) error {
	rank := r.ep.Rank()
	switch {
	case rank != 0:
		return fmt.Errorf("trainer: rank %d: evaluations are rank 0's (the run directory records rank 0's model): evaluate on rank 0", rank)
	case r.closed:
		return errors.New("trainer: rank 0: the session is closed: evaluate before closing it")
	case math.IsNaN(acc) || acc < 0 || acc > 1:
		return fmt.Errorf("trainer: rank 0: evaluation after round %d: accuracy %v, want a fraction in [0, 1]", r.rounds, acc)
	}
	// Before the first round, r.last is round -1 at time 0: the initial model.
	e := EvalResult{Round: r.last.Round, GlobalRound: r.global, SnapshotTime: time.Duration(r.last.TimeS * float64(time.Second)),
		GlobalSamples: r.samples, Acc: acc, Loss: loss}
	r.evals = append(r.evals, e)
	r.live.eval(e)
	return r.live.err()
}

// Close is Session's Close, then the run directory's end: every rank's records gathered to
// rank 0, which writes metrics.jsonl and summary.json (Summary returns it). A session whose
// call failed gathers nothing (the ranks are no longer in step): rank 0's summary.json says
// that the run ended early and why. A second Close returns the first's result.
func (r *RunSession) Close(ctx context.Context) (*Result, error) {
	res, err := r.Session.Close(ctx)
	if r.closed {
		return res, err
	}
	r.closed = true
	if err != nil {
		r.keep(err)
	}
	if r.failed != nil {
		if eerr := r.live.endEarly(ctx, r.failed); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return res, err
	}
	if r.dir == "" {
		return res, nil
	}
	markAccuracy(res.Records, r.evals)
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	all, err := GatherRecords(gctx, r.ep, res.Records)
	if err != nil {
		return res, r.fail(ctx, err)
	}
	if r.ep.Rank() != 0 {
		r.live.close()
		return res, r.live.err()
	}
	sum, err := r.live.finish(all, Ran{Collective: res.Collective, DataPath: r.ran})
	if err != nil {
		return res, r.fail(ctx, err)
	}
	r.summary = &sum
	return res, nil
}

// Summary is rank 0's summary.json once Close wrote it; nil before, on the other ranks and
// without a run directory.
func (r *RunSession) Summary() *metrics.Summary { return r.summary }

// fail records on rank 0 that the run ended early with err, and returns err (with the
// recording's own failure, if any).
func (r *RunSession) fail(ctx context.Context, err error) error {
	if r.live == nil {
		return err
	}
	if eerr := r.live.endEarly(ctx, err); eerr != nil {
		return errors.Join(err, eerr)
	}
	return err
}

// markAccuracy gives each of recs whose round was evaluated that evaluation's accuracy, as
// Train's final evaluation does for rank 0's records.
func markAccuracy(recs []metrics.RoundRecord, evals []EvalResult) {
	if len(evals) == 0 {
		return
	}
	acc := make(map[int]float64, len(evals))
	for _, e := range evals {
		acc[e.Round] = e.Acc
	}
	for i := range recs {
		if a, ok := acc[recs[i].Round]; ok {
			recs[i].Accuracy, recs[i].HasAccuracy = a, true
		}
	}
}
