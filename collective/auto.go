package collective

import (
	"math"
	"strings"
	"sync"

	"github.com/hetsync/hetsync/topology"
)

// auto picks an algorithm per call from the simulator: for each candidate it builds the
// schedules of all p ranks for this (collective, n, dtype), replays them on the network
// model (or, for large jobs, prices them from closed forms, plan.go), and runs the fastest,
// or a simpler candidate predicted within autoTieMargin of it (see pickFrom). Every rank
// computes the same choice from the same inputs (the same matrix, the same registry in the
// same order), and the decision is cached per (collective, n, element size).
//
// The candidates are the algorithms of the communicator's Registry (Registry.candidateConfigs):
// with the built-in ones and no link matrix, for allreduce recursive doubling (latency-optimal,
// wins for small messages), butterfly, binary-blocks and ring, and for reduce-scatter and
// allgather the last three. ps is not among them: it has the ring's volume in that model but
// is incast-sensitive on real networks, which only a matrix's shared host links can show.
// The model is one α-β pair for every link (AutoAlpha, AutoBeta), or, when every peer is
// reached over shared memory, the shared-memory model (auto_shm.go).
//
// With Options.Links the model is the matrix's (per-pair costs, host NICs and group uplinks
// shared by the messages that cross them, see layout.model) and the candidates are every
// configuration: each algorithm in each rank order (rank, grouped, interleaved), ps with
// placed servers, and the hierarchy over each algorithm but recursive doubling in each host
// order.
//
// On the α-β model (α = 30 µs, 10 Gb/s) auto takes recursive doubling below a few KiB,
// butterfly for powers of two above, and binary-blocks or ring for other p depending on the
// block shape (p = 9, 8 + 1, goes to the ring for large messages).
type auto struct {
	opts Options
	reg  *Registry // the algorithms auto chooses among: Options.Registry's, fixed at New
	lay  *layout   // nil without a matrix
	net  *netModel // the replay's network, built when a replay first needs it
	pnet *planNet  // the closed forms' network (plan.go), built when they first need it
	// cands are the candidates of each collective kind, configured once per matrix.
	cands map[collKind][]autoCandidate
	// buckets are the decisions shared by every size of a bucket (plan.go's fromBucket).
	buckets map[bucketKey]bucket
	// mu guards choice: the call that has the communicator's turn decides, and
	// Comm.AllReduceChoice may ask at any time from another goroutine.
	mu     sync.Mutex
	choice map[autoKey]autoChoice
	shm    bool // without a matrix, plan on the shared-memory model (auto_shm.go)
	// replayRanks is the p up to which auto replays every candidate in full: planReplayRanks,
	// lowered by the tests that hold the closed forms to the replay.
	replayRanks int
}

// The cost-model constants auto uses without a link matrix: per-message latency (s) and
// per-byte time (s/B, 10 Gb/s).
const (
	AutoAlpha = 30e-6
	AutoBeta  = 1 / 1.25e9
)

type autoKey struct {
	kind              collKind
	p, n, elem, segsz int
}

// autoChoice is a decision: the configuration's name, its algorithm and predicted time (s).
type autoChoice struct {
	name      string
	alg       algorithm
	predicted float64
}

// autoCandidate is one configuration auto may run.
type autoCandidate struct {
	name string
	alg  algorithm
}

func newAuto(opts Options) *auto {
	a := &auto{opts: opts, reg: registryOf(opts).clone(), choice: make(map[autoKey]autoChoice), buckets: make(map[bucketKey]bucket), replayRanks: planReplayRanks}
	if opts.Links != nil {
		a.lay = newLayout(opts.Links)
	}
	return a
}

// matrix is the link matrix auto plans from, nil without one.
func (a *auto) matrix() *topology.Matrix {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lay == nil {
		return nil
	}
	return a.lay.m
}

// setMatrix makes auto plan from m from now on (a re-plan): every earlier decision is dropped.
func (a *auto) setMatrix(m *topology.Matrix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lay = newLayout(m)
	a.net, a.pnet, a.cands = nil, nil, nil
	clear(a.buckets)
	clear(a.choice)
}

// model is the network auto replays on. The caller holds a.mu.
func (a *auto) model() *netModel {
	if a.net == nil && a.lay != nil {
		a.net = a.lay.model()
	}
	if a.net != nil {
		return a.net
	}
	if a.shm {
		return sharedMemoryModel()
	}
	return uniformModel(AutoAlpha, AutoBeta)
}

// candidates lists the configurations for one collective kind, in tie-break order.
func (a *auto) candidates(kind collKind) []autoCandidate {
	if c, ok := a.cands[kind]; ok {
		return c
	}
	var cands []autoCandidate
	for _, c := range a.reg.candidateConfigs(kind, a.lay != nil) {
		alg := c.base
		if a.lay != nil {
			alg = configure(c.algConfig, c.base, a.lay)
		}
		cands = append(cands, autoCandidate{name: c.name, alg: alg})
	}
	if a.cands == nil {
		a.cands = make(map[collKind][]autoCandidate)
	}
	a.cands[kind] = cands
	return cands
}

func (a *auto) decide(kind collKind, b *builder) autoChoice {
	key := autoKey{kind: kind, p: b.p, n: b.n, elem: b.elemSize, segsz: b.seg * b.elemSize}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.choice[key]; ok {
		return c
	}
	best := a.fromBucket(kind, b)
	if len(a.choice) >= maxCachedSchedules {
		clear(a.choice)
	}
	a.choice[key] = best
	return best
}

// choose prices every candidate of b's call and picks one. The caller holds a.mu.
func (a *auto) choose(kind collKind, b *builder) autoChoice {
	cands := a.candidates(kind)
	return pickFrom(cands, a.price(kind, b, cands))
}

// pickFrom picks among priced candidates.
func pickFrom(cands []autoCandidate, priced pricing) autoChoice {
	times := priced.times
	fastest := math.Inf(1)
	for _, t := range times {
		fastest = math.Min(fastest, t)
	}
	// Among the candidates within autoTieMargin of the fastest, the simplest: flat before
	// hierarchical, then the fewest messages, then the earlier. A prediction a few per cent
	// ahead is within the model's error, and a simpler schedule has fewer steps for the
	// network and the scheduler to get wrong.
	pick, msgs := len(cands)-1, -1
	for i, c := range cands {
		if !(times[i] <= (1+autoTieMargin)*fastest) {
			continue
		}
		n := priced.messages(i)
		if msgs < 0 || simpler(c, n, cands[pick], msgs) {
			pick, msgs = i, n
		}
	}
	return autoChoice{name: cands[pick].name, alg: cands[pick].alg, predicted: times[pick]}
}

// autoTieMargin is how much slower than the fastest candidate a simpler one may be predicted
// and still be chosen.
const autoTieMargin = 0.03

// simpler reports whether candidate a, sending na messages, is simpler than b, sending nb: flat
// before hierarchical, then fewer messages.
func simpler(a autoCandidate, na int, b autoCandidate, nb int) bool {
	ha, hb := strings.HasPrefix(a.name, hierPrefix), strings.HasPrefix(b.name, hierPrefix)
	if ha != hb {
		return hb
	}
	return na < nb
}

// messages is how many messages all ranks send in alg's schedules for b's call.
func messages(alg algorithm, kind collKind, b *builder) int {
	n := 0
	for _, s := range buildAll(alg, kind, b.p, b.n, 0, b.elemSize, b.seg*b.elemSize) {
		n += len(s.sends)
	}
	return n
}

// pin makes the configuration named name the decision for b's calls when its predicted time
// is at most limit, and reports whether it did.
func (a *auto) pin(kind collKind, b *builder, name string, limit float64) (autoChoice, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.candidates(kind) {
		if c.name != name {
			continue
		}
		t := a.price(kind, b, []autoCandidate{c}).times[0]
		if t > limit {
			return autoChoice{}, false
		}
		ch := autoChoice{name: c.name, alg: c.alg, predicted: t}
		a.choice[autoKey{kind: kind, p: b.p, n: b.n, elem: b.elemSize, segsz: b.seg * b.elemSize}] = ch
		return ch, true
	}
	return autoChoice{}, false
}

func (a *auto) pick(kind collKind, b *builder) algorithm { return a.decide(kind, b).alg }

func (a *auto) allReduce(b *builder)     { a.pick(kindAllReduce, b).allReduce(b) }
func (a *auto) reduceScatter(b *builder) { a.pick(kindReduceScatter, b).reduceScatter(b) }
func (a *auto) allGather(b *builder)     { a.pick(kindAllGather, b).allGather(b) }
