package collective

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetsync/hetsync/collective/topology"
	"github.com/hetsync/hetsync/transport"
)

// ReplanOptions tune how auto follows a network that changes under a running job (a link
// that slows down, a congested uplink). Each rank times the sends of every call to each peer
// (no extra traffic) and compares each call's time with the time its plan predicted; every
// Every judged calls the ranks vote, and when some rank saw Calls judged calls in a row off
// plan and a link off the matrix, every rank puts the timed links into the matrix and plans
// again from it, all at the same call. It applies to auto with a link matrix only: a named
// configuration runs as it was named.
type ReplanOptions struct {
	// Off keeps the plan of the matrix the communicator started with.
	Off bool
	// Threshold is how far off is off: a call that took more than (1+Threshold) times its
	// predicted time or less than 1/(1+Threshold) of it, a link whose timed cost per byte is
	// that far from the matrix's. 0 means DefaultReplanThreshold.
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
// judged calls after the calls go off plan.
const (
	DefaultReplanThreshold = 1.0
	DefaultReplanCalls     = 3
	DefaultReplanEvery     = 4
)

// Calls that are judged: allreduce, reduce-scatter and allgather run by auto whose predicted
// time is at least replanMinPredicted (shorter calls are dominated by per-message overheads
// the model leaves out). A link's cost per byte is the median of the last replanSamples sends
// of at least replanSampleBytes to that peer since the last vote, and counts from
// replanMinSamples on: a send that fits in the socket buffer times a copy, not the link, and
// one the scheduler held up on a busy machine times the machine, and the median drops both.
const (
	replanMinPredicted = 2e-3
	replanSampleBytes  = 64 << 10
	replanSamples      = 15
	replanMinSamples   = 4
)

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
	// Links is how many rank pairs got a new cost per byte.
	Links int
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
	opts ReplanOptions
	a    *auto
	// samples[q] holds the cost per byte of the latest sends to peer q since the last vote,
	// taken[q] how many were taken (the latest replanSamples are kept); timing is false while
	// the vote itself runs.
	samples        [][replanSamples]float64
	taken          []int
	scratch        []float64
	timing         bool
	streak, judged int
	predicted      map[schedKey]float64
	flags, costs   []float64 // vote buffers: [flag, streak] and a p×p matrix of costs per byte
	flagSched      *schedule
	costSched      *schedule

	mu      sync.Mutex
	history []Replan
}

// newReplanner is the re-planner of a communicator of p ranks running alg, nil when it does
// not re-plan.
func newReplanner(opts Options, alg algorithm, p, rank int) *replanner {
	a, ok := alg.(*auto)
	if !ok || a.lay == nil || opts.Replan.Off || p < 2 {
		return nil
	}
	elem := Float64.Size()
	return &replanner{
		opts: opts.Replan.withDefaults(), a: a,
		samples: make([][replanSamples]float64, p), taken: make([]int, p), scratch: make([]float64, 0, replanSamples),
		timing:    true,
		predicted: make(map[schedKey]float64),
		flags:     make([]float64, 2), costs: make([]float64, p*p),
		flagSched: buildSchedule(recursiveDoubling{}, kindAllReduce, p, rank, 2, 0, elem, opts.SegmentBytes),
		costSched: buildSchedule(recursiveDoubling{}, kindAllReduce, p, rank, p*p, 0, elem, opts.SegmentBytes),
	}
}

// clock is the start of a call's timing: the zero time when the Comm does not re-plan.
func (r *replanner) clock() time.Time {
	if r == nil {
		return time.Time{}
	}
	return time.Now()
}

// sent records a send of b bytes to peer that started at start.
func (r *replanner) sent(peer, b int, start time.Time) {
	if r == nil || !r.timing || b < replanSampleBytes {
		return
	}
	r.samples[peer][r.taken[peer]%replanSamples] = time.Since(start).Seconds() / float64(b)
	r.taken[peer]++
}

// estimate is the timed cost per byte to peer, 0 when too few sends were timed.
func (r *replanner) estimate(peer int) float64 {
	k := min(r.taken[peer], replanSamples)
	if k < replanMinSamples {
		return 0
	}
	x := append(r.scratch[:0], r.samples[peer][:k]...)
	slices.Sort(x)
	return x[k/2]
}

// predict is the predicted time of a call auto runs, 0 for a call it does not plan.
func (r *replanner) predict(c *Comm, kind collKind, n int, dt DType) float64 {
	switch kind {
	case kindAllReduce, kindReduceScatter, kindAllGather:
	default:
		return 0
	}
	if n == 0 {
		return 0
	}
	key := schedKey{kind: kind, n: n, elemSize: dt.Size()}
	if t, ok := r.predicted[key]; ok {
		return t
	}
	t := r.a.decide(kind, newBuilder(c.Size(), c.Rank(), n, dt.Size(), c.opts.SegmentBytes)).predicted
	r.predicted[key] = t
	return t
}

// replanAfter judges call seq, which started at start, and at every Every-th judged call runs
// the vote and, when it says so, the re-plan. Which calls are judged and when the ranks vote
// depend only on the calls and the matrix, so every rank votes after the same calls.
func (c *Comm) replanAfter(ctx context.Context, seq uint64, kind collKind, n int, dt DType, start time.Time) error {
	r := c.replan
	if r == nil {
		return nil
	}
	pred := r.predict(c, kind, n, dt)
	if pred < replanMinPredicted {
		return nil
	}
	took := time.Since(start).Seconds()
	if off := 1 + r.opts.Threshold; took > off*pred || took*off < pred {
		r.streak++
	} else {
		r.streak = 0
	}
	if r.judged++; r.judged < r.opts.Every {
		return nil
	}
	r.judged = 0
	err := c.vote(ctx, seq)
	clear(r.taken)
	if err != nil {
		return fmt.Errorf("%s: re-planning vote after %v #%d: %w", c.who, kind, seq, err)
	}
	return nil
}

// vote asks every rank whether to re-plan and, when one asks for it, gathers every rank's
// timed links and re-plans. It is an allreduce of two numbers (Max: does some rank ask, the
// longest streak); only a re-plan gathers the p×p costs.
func (c *Comm) vote(ctx context.Context, seq uint64) error {
	r := c.replan
	r.timing = false
	defer func() { r.timing = true }()
	costs := r.costs
	clear(costs)
	m := r.a.matrix()
	p, me := c.Size(), c.Rank()
	linkOff := false
	for q := range p {
		beta := r.estimate(q)
		if q == me || beta == 0 {
			continue
		}
		if old := m.Links[me][q].Beta; beta > (1+r.opts.Threshold)*old || beta*(1+r.opts.Threshold) < old {
			costs[me*p+q] = beta
			linkOff = true
		}
	}
	r.flags[0], r.flags[1] = 0, float64(r.streak)
	if r.streak >= r.opts.Calls && linkOff {
		r.flags[0] = 1
	}
	if err := c.voteRound(ctx, seq, r.flagSched, r.flags, 1); err != nil {
		return err
	}
	if r.flags[0] == 0 {
		return nil
	}
	if err := c.voteRound(ctx, seq, r.costSched, costs, 2); err != nil {
		return err
	}
	next, changed := withCosts(m, costs)
	r.a.setMatrix(next)
	clear(c.cache)
	clear(r.predicted)
	r.streak = 0
	r.mu.Lock()
	r.history = append(r.history, Replan{Seq: seq, Streak: int(r.flags[1]), Links: changed})
	r.mu.Unlock()
	return nil
}

// voteRound runs one allreduce (Max) of v on the call's sequence number under an op signature
// of its own, which no user call has (their roots are not negative): the peers' vote messages
// come after their messages of call seq on the channel, so they cannot be taken for them.
func (c *Comm) voteRound(ctx context.Context, seq uint64, s *schedule, v []float64, round int) error {
	c.growTemp(s, Float64.Size())
	buf := F64(v)
	h := transport.Header{Channel: transport.ChanCollective, Seq: seq,
		Op: c.signature(kindAllReduce, Float64, Max, len(v), -round)}
	return c.execute(ctx, s, buf, Buffer{}, Max, h)
}

// withCosts is m with the voted costs per byte: every rank pair of a host pair some rank
// timed takes the fastest timing of that host pair (the one least slowed by ranks sharing the
// hosts' links), the others keep m's. It returns how many rank pairs changed.
func withCosts(m *topology.Matrix, costs []float64) (*topology.Matrix, int) {
	p := m.P
	nh := m.Hosts()
	hostCost := make([]float64, nh*nh)
	for from := range p {
		for to := range p {
			v := costs[from*p+to]
			if v <= 0 {
				continue
			}
			i := m.Host[from]*nh + m.Host[to]
			if hostCost[i] == 0 || v < hostCost[i] {
				hostCost[i] = v
			}
		}
	}
	next := &topology.Matrix{P: p, Host: append([]int(nil), m.Host...), Links: make([][]topology.Link, p)}
	changed := 0
	for from := range p {
		next.Links[from] = append([]topology.Link(nil), m.Links[from]...)
		for to := range p {
			if v := hostCost[m.Host[from]*nh+m.Host[to]]; v > 0 && from != to {
				next.Links[from][to].Beta = v
				changed++
			}
		}
	}
	return next, changed
}
