package collective

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// ReplanOptions tune how auto follows a network that changes under a running job (a link
// that slows down, a congested uplink). Each rank compares the time of every judged call with
// the time its plan predicted (no extra traffic); every Every judged calls the ranks vote (an
// allreduce of two numbers), and when some rank saw Calls judged calls in a row off plan,
// every rank measures the links again (topology.Measure) and plans from the new matrix, all
// at the same call (the job's communicator only: a sub-communicator keeps the plan of its part
// of the job's matrix). A re-measure that leaves the plan of those calls as it was makes the
// next one wait twice as many votes, so that calls the model predicts badly for another
// reason (a busy CPU) do not measure the links over and over. The vote and a re-measure run
// within the time limit of the call after which they happen. It applies to auto with a link
// matrix only: a named configuration runs as it was named.
//
// The links themselves are measured, not taken from the calls' own timings: a send returns
// once its bytes are in the socket buffers, which hold megabytes, so timed sends read a link
// several times faster than it is; and a receive waits for the slowest link upstream of it,
// not for its own (docs/results/topology.md has the numbers).
type ReplanOptions struct {
	// Off keeps the plan of the matrix the communicator started with.
	Off bool
	// Threshold is how far off is off: a call that took more than (1+Threshold) times its
	// predicted time or less than 1/(1+Threshold) of it. 0 means DefaultReplanThreshold.
	Threshold float64
	// Calls is how many judged calls in a row a rank must see off plan before it votes for a
	// new plan. 0 means DefaultReplanCalls.
	Calls int
	// Every is how many judged calls pass between two votes. 0 means DefaultReplanEvery.
	Every int
}

// EnvReplan is the variable hetsync.Init reads ReplanOptions from, in ParseReplanOptions's
// form, when the program set none.
const EnvReplan = "HETSYNC_REPLAN"

// Defaults of ReplanOptions. A re-plan comes at most DefaultReplanCalls+DefaultReplanEvery-1
// judged calls after the calls go off plan (unless an earlier re-measure of the same calls
// changed nothing, see ReplanOptions).
const (
	DefaultReplanThreshold = 1.0
	DefaultReplanCalls     = 3
	DefaultReplanEvery     = 4
)

// Calls that are judged: allreduce, reduce-scatter and allgather run by auto whose predicted
// time is at least replanMinPredicted (shorter calls are dominated by per-message overheads
// the model leaves out).
const replanMinPredicted = 2e-3

// replanGain is how much faster, on a re-measured matrix, a new plan must be than the one
// running for a re-plan to switch to it.
const replanGain = 0.1

// replanMeasure are the probes of a re-measure: as long as Init's, so that fast links are
// read to better than the factors between them.
func replanMeasure() topology.MeasureOptions {
	return topology.MeasureOptions{MaxLargeBytes: 8 << 20, MinLargeTime: 20 * time.Millisecond}
}

func (o ReplanOptions) withDefaults() ReplanOptions {
	if o.Threshold == 0 {
		o.Threshold = DefaultReplanThreshold
	}
	if o.Calls == 0 {
		o.Calls = DefaultReplanCalls
	}
	if o.Every == 0 {
		o.Every = DefaultReplanEvery
	}
	return o
}

// Validate checks the values; zero values select the defaults.
func (o ReplanOptions) Validate() error {
	if !(o.Threshold >= 0) || math.IsInf(o.Threshold, 0) || o.Calls < 0 || o.Every < 0 {
		return fmt.Errorf("collective: Replan %+v: threshold, calls and every must be finite and not negative", o)
	}
	return nil
}

// String is the form ParseReplanOptions reads.
func (o ReplanOptions) String() string {
	if o.Off {
		return "off"
	}
	d := o.withDefaults()
	return fmt.Sprintf("threshold=%g,calls=%d,every=%d", d.Threshold, d.Calls, d.Every)
}

// ParseReplanOptions reads "off", "on" (the defaults), "" (the defaults) or a comma-separated
// list of threshold=X, calls=N and every=N (the others at their defaults): the form of
// HETSYNC_REPLAN and bench's --replan.
func ParseReplanOptions(s string) (ReplanOptions, error) {
	var o ReplanOptions
	switch s {
	case "", "on":
		return o, nil
	case "off":
		return ReplanOptions{Off: true}, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("%q is not KEY=VALUE", kv)
		case k == "threshold":
			o.Threshold, err = strconv.ParseFloat(v, 64)
		case k == "calls":
			o.Calls, err = strconv.Atoi(v)
		case k == "every":
			o.Every, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown key %q (threshold, calls, every)", k)
		}
		if err != nil {
			return o, fmt.Errorf("collective: re-plan settings %q (off, on, or threshold=X,calls=N,every=N): %w", s, err)
		}
	}
	return o, o.Validate()
}

// Replan is one re-plan, the same on every rank.
type Replan struct {
	// Seq is the call after which the ranks re-planned; the next call runs the new plan.
	Seq uint64
	// Streak is the longest run of judged calls off plan that a rank had seen at the vote.
	Streak int
	// From and To are what the calls before the vote ran and what they run now.
	From, To string
	// Measure is how long measuring the links took.
	Measure time.Duration
}

// Replans lists the re-plans so far, oldest first.
func (c *Comm) Replans() []Replan {
	if c.replan == nil {
		return nil
	}
	c.replan.mu.Lock()
	defer c.replan.mu.Unlock()
	return append([]Replan(nil), c.replan.history...)
}

// replanner is a Comm's re-planning state. Everything but history belongs to the call that
// has the turn.
type replanner struct {
	opts   ReplanOptions
	a      *auto
	streak int // judged calls off plan in a row, this rank's own
	judged int // judged calls since the last vote, the same on every rank
	last   schedKey
	// judges are the predicted time and the back-off of each kind of call: wait is how many
	// votes the call must still let pass before it may ask again, skip how many the next
	// re-measure that changes nothing makes it wait. Both change only on what the ranks
	// agreed, so they are the same on every rank.
	judges    map[schedKey]*callJudge
	flags     []float64 // the vote: [asks, longest streak]
	flagSched *schedule
	// measure measures the links when the ranks voted for it: topology.Measure, which every
	// rank runs together. Tests whose shaped links promise a matrix replace it, so that what a
	// re-measure reads does not depend on how busy the machine running them is.
	measure func(context.Context, transport.Endpoint) (*topology.Matrix, error)

	mu      sync.Mutex
	history []Replan
}

type callJudge struct {
	predicted  float64
	wait, skip int
}

// newReplanner is the re-planner of a communicator of p ranks running alg, nil when it does
// not re-plan.
func newReplanner(opts Options, alg algorithm, p, rank int) *replanner {
	a, ok := alg.(*auto)
	if !ok || a.lay == nil || opts.Replan.Off || p < 2 {
		return nil
	}
	return &replanner{
		opts: opts.Replan.withDefaults(), a: a,
		judges:    make(map[schedKey]*callJudge),
		flags:     make([]float64, 2),
		flagSched: buildSchedule(recursiveDoubling{}, kindAllReduce, p, rank, 2, 0, Float64.Size(), opts.SegmentBytes),
		measure: func(ctx context.Context, ep transport.Endpoint) (*topology.Matrix, error) {
			return topology.Measure(ctx, ep, replanMeasure())
		},
	}
}

// clock is the start of a call's timing: the zero time when the Comm does not re-plan.
func (r *replanner) clock() time.Time {
	if r == nil {
		return time.Time{}
	}
	return time.Now()
}

// judge is the judge of a call auto plans, nil for one it does not.
func (r *replanner) judge(c *Comm, key schedKey) *callJudge {
	switch key.kind {
	case kindAllReduce, kindReduceScatter, kindAllGather:
	default:
		return nil
	}
	if key.n == 0 {
		return nil
	}
	j, ok := r.judges[key]
	if !ok {
		if len(r.judges) >= maxCachedSchedules {
			clear(r.judges)
		}
		j = &callJudge{predicted: r.a.decide(key.kind, newBuilder(c.Size(), c.Rank(), key.n, key.elemSize, c.segmentBytes(key.n, key.elemSize))).predicted, skip: 1}
		r.judges[key] = j
	}
	if j.predicted < replanMinPredicted {
		return nil
	}
	return j
}

// replanAfter judges call seq, which started at start, and at every Every-th judged call runs
// the vote and, when it says so, the re-plan. Which calls are judged and when the ranks vote
// depend only on the calls and the matrix, so every rank votes after the same calls.
func (c *Comm) replanAfter(ctx context.Context, seq uint64, kind collKind, n int, dt DType, start time.Time) error {
	r := c.replan
	if r == nil {
		return nil
	}
	key := schedKey{kind: kind, n: n, elemSize: dt.Size()}
	j := r.judge(c, key)
	if j == nil {
		return nil
	}
	if key != r.last {
		r.last, r.streak = key, 0
	}
	took := time.Since(start).Seconds()
	if off := 1 + r.opts.Threshold; took > off*j.predicted || took*off < j.predicted {
		r.streak++
	} else {
		r.streak = 0
	}
	if r.judged++; r.judged < r.opts.Every {
		return nil
	}
	r.judged = 0
	if err := c.vote(ctx, seq, key, j); err != nil {
		return fmt.Errorf("%s: re-planning after %v #%d: %w", c.who, kind, seq, err)
	}
	return nil
}

// vote asks every rank whether to re-plan and, when one asks for it, measures the links and
// re-plans from them. The calls of key, which the latest judged call made, ask.
func (c *Comm) vote(ctx context.Context, seq uint64, key schedKey, j *callJudge) error {
	r := c.replan
	r.flags[0], r.flags[1] = 0, float64(r.streak)
	if r.streak >= r.opts.Calls && j.wait == 0 {
		r.flags[0] = 1
	}
	j.wait = max(0, j.wait-1)
	c.growTemp(r.flagSched, Float64.Size())
	h := transport.Header{Channel: chanCollective, Seq: seq,
		Op: c.signature(kindAllReduce, Float64, Max, len(r.flags), -1)}
	// The vote runs under the call's sequence number with an op signature no user call has
	// (their roots are not negative): the peers' vote messages come after their messages of
	// call seq on the channel, so neither can be taken for the other.
	if err := c.execute(ctx, r.flagSched, F64(r.flags), Buffer{}, Max, h); err != nil {
		return fmt.Errorf("voting: %w", err)
	}
	if r.flags[0] == 0 {
		return nil
	}
	began := time.Now()
	measured, err := r.measure(ctx, c.ep)
	if err != nil {
		return fmt.Errorf("measuring the links: %w", err)
	}
	took := time.Since(began)
	old := r.a.matrix()
	next := &topology.Matrix{P: old.P, Host: old.Host, Links: measured.Links}
	b := newBuilder(c.Size(), c.Rank(), key.n, key.elemSize, c.segmentBytes(key.n, key.elemSize))
	from := r.a.decide(key.kind, b).name
	r.a.setMatrix(next)
	clear(c.cache)
	to := r.a.decide(key.kind, b)
	if to.name != from {
		// Keep the plan unless the new one gains more than replanGain on the new matrix:
		// between near ties a re-measure's noise would switch back and forth.
		if kept, ok := r.a.pin(key.kind, b, from, to.predicted/(1-replanGain)); ok {
			to = kept
		}
	}
	// Every judge predicts from the new matrix now; the asking call keeps its back-off,
	// doubled when the new matrix left its plan as it was.
	wait, skip := 0, 1
	if to.name == from {
		wait, skip = j.skip, 2*j.skip
	}
	clear(r.judges)
	r.judges[key] = &callJudge{predicted: to.predicted, wait: wait, skip: skip}
	r.streak = 0
	r.mu.Lock()
	r.history = append(r.history, Replan{Seq: seq, Streak: int(r.flags[1]), From: from, To: to.name, Measure: took})
	r.mu.Unlock()
	return nil
}
