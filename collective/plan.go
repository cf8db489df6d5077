package collective

import (
	"math"
	"math/bits"
	"slices"

	"github.com/hetsync/hetsync/topology"
)

// How auto prices its candidates. The replay (simulate.go) builds every rank's schedule and
// runs them against each other: exact for the model, and the reference the tests hold the
// rest to, but its work grows with p² and more (docs/results/collective-constants.md has its
// times). So auto replays only where that is cheap or where nothing else is right, and
// otherwise prices every candidate from closed forms (plan_cost.go, plan_hosts.go):
//
//   - p ≤ planReplayRanks: replay;
//   - an irregular placement and p ≤ planIrregularReplayRanks: replay. Irregular is hosts of
//     different rank counts (a hierarchy's lanes then load its hosts unevenly, and the closed
//     forms take the busiest rank's share as everyone's) or a host pair whose rank pairs
//     differ (the closed forms read one link per host pair);
//   - p ≤ planShortlistRanks: the closed forms bound every candidate's time from below and
//     above, and only the candidates whose lower bound is within planShortlistSlack of the
//     least upper bound are replayed;
//   - the shared-memory model (auto_shm.go): replay, its hosts are small;
//   - everything else: closed forms, in O(p log p) for the flat algorithms and O(H²) for the
//     parameter server and the hierarchy's local and piece moves, H the number of hosts.
//
// An algorithm registered from outside the package has no closed forms: the replay prices it
// where auto replays and in the shortlist, and above planShortlistRanks on a regular layout it
// goes unpriced (Plan reports it so) and auto does not choose it.
//
// Both are pure functions of the matrix, the call and the candidate order, evaluated in a
// fixed order with no map iteration, so every rank reaches the same decision.
const (
	planReplayRanks          = 8
	planIrregularReplayRanks = 64
	planShortlistRanks       = 64
	planShortlistSlack       = 0.25
)

// pricing is the predicted time of every candidate and, for the tie-break, how many messages
// it sends.
type pricing struct {
	times    []float64
	messages func(i int) int
}

// replays reports whether auto replays calls of p ranks in full.
func (a *auto) replays(p int) bool {
	switch {
	case p <= a.replayRanks:
		return true
	case a.lay == nil:
		return a.shm
	case !a.lay.regular():
		return p <= planIrregularReplayRanks
	}
	return false
}

// price prices every candidate of b's call, in candidate order.
func (a *auto) price(kind collKind, b *builder, cands []autoCandidate) pricing {
	times := make([]float64, len(cands))
	if a.replays(b.p) {
		for i, c := range cands {
			t, err := simulateKind(c.alg, kind, b.p, b.n, b.elemSize, b.seg*b.elemSize, a.model())
			if err != nil {
				t = math.Inf(1)
			}
			times[i] = t
		}
		return pricing{times: times, messages: func(i int) int { return messages(cands[i].alg, kind, b) }}
	}
	lo, hi, msgs := a.closedForms(kind, b, cands)
	for i := range cands {
		times[i] = (lo[i] + hi[i]) / 2
	}
	if b.p > planShortlistRanks {
		return pricing{times: times, messages: func(i int) int { return msgs[i] }}
	}
	// Replay the candidates that can be the fastest: those whose lower bound is not above
	// every upper bound (with planShortlistSlack, for the bounds are the model's, not proofs).
	least := slices.Min(hi)
	for i, c := range cands {
		if lo[i] > (1+planShortlistSlack)*least {
			times[i] = math.Inf(1)
			continue
		}
		t, err := simulateKind(c.alg, kind, b.p, b.n, b.elemSize, b.seg*b.elemSize, a.model())
		if err != nil {
			t = math.Inf(1)
		}
		times[i] = t
	}
	return pricing{times: times, messages: func(i int) int { return messages(cands[i].alg, kind, b) }}
}

// closedForms is the bounds of every candidate's time and its message count.
func (a *auto) closedForms(kind collKind, b *builder, cands []autoCandidate) (lo, hi []float64, msgs []int) {
	if a.pnet == nil || a.pnet.p != b.p {
		if a.lay != nil {
			a.pnet = hostPlanNet(a.lay)
		} else {
			a.pnet = uniformPlanNet(b.p, AutoAlpha, AutoBeta)
		}
	}
	cost := newPlanCost(a.pnet, b)
	lo, hi, msgs = make([]float64, len(cands)), make([]float64, len(cands)), make([]int, len(cands))
	for i, c := range cands {
		if !closedForm(c.alg) {
			// Nothing bounds its time from below: the shortlist replays it, and above
			// planShortlistRanks it goes unpriced.
			lo[i], hi[i] = 0, math.Inf(1)
			continue
		}
		lo[i], hi[i], msgs[i] = cost.of(c.alg, kind)
	}
	return lo, hi, msgs
}

// closedForm reports whether the planner prices alg from closed forms: every built-in
// algorithm in any configuration, not one registered from outside, which only the replay of
// its schedules prices.
func closedForm(alg algorithm) bool {
	switch x := alg.(type) {
	case external:
		return false
	case permuted:
		return closedForm(x.inner)
	case hierarchical:
		return closedForm(x.inter)
	}
	return true
}

// planCost prices one call shape's candidates from closed forms, reusing one coster.
type planCost struct {
	c            *coster
	b            *builder
	ranks, hosts []int // the identity orders of ranks and of hosts
	// Candidates that run the same schedule shape in the same order cost the same (the rank
	// and grouped orders coincide when ranks are numbered host by host; binary-blocks is the
	// butterfly on a power of two): each is priced once.
	orders [][]int
	seen   map[planShape]planPrice
}

// planShape is a schedule shape: the algorithm that runs, over ranks or hosts, in which order
// (an index into planCost.orders).
type planShape struct {
	alg   string
	hier  bool
	order int
}

type planPrice struct {
	lo, hi float64
	msgs   int
}

func newPlanCost(net *planNet, b *builder) *planCost {
	pc := &planCost{c: newCoster(net, b.elemSize, b.seg), b: b, ranks: make([]int, net.p), hosts: make([]int, len(net.hosts))}
	for i := range pc.ranks {
		pc.ranks[i] = i
	}
	for i := range pc.hosts {
		pc.hosts[i] = i
	}
	pc.seen = make(map[planShape]planPrice)
	return pc
}

// shape is alg's schedule shape for a call of kind, ok false for one priced every time.
func (pc *planCost) shape(alg algorithm, kind collKind) (planShape, bool) {
	var sh planShape
	order := pc.ranks
	if h, ok := alg.(hierarchical); ok {
		sh.hier, alg, order = true, h.inter, h.hostOrder
	}
	alg, order = inOrder(alg, kind, order)
	switch alg.(type) {
	case ring:
		sh.alg = "ring"
	case butterfly:
		sh.alg = "butterfly"
	case binaryBlocks:
		sh.alg = "binary-blocks"
		if pow2Floor(len(order)) == len(order) {
			sh.alg = "butterfly"
		}
	case recursiveDoubling:
		sh.alg = "recursive-doubling"
	default:
		return sh, false
	}
	sh.order = slices.IndexFunc(pc.orders, func(o []int) bool { return slices.Equal(o, order) })
	if sh.order < 0 {
		sh.order = len(pc.orders)
		pc.orders = append(pc.orders, order)
	}
	return sh, true
}

// inOrder is the algorithm that runs for a call of kind and the order it runs in: a
// renumbered algorithm's own order (for an allreduce; reduce-scatter and allgather run in
// rank order), a ring's order, or else order.
func inOrder(alg algorithm, kind collKind, order []int) (algorithm, []int) {
	switch x := alg.(type) {
	case permuted:
		if kind == kindAllReduce {
			order = x.order
		}
		return x.inner, order
	case ring:
		if x.order != nil {
			order = x.order
		}
	}
	return alg, order
}

// of is the bounds of alg's time and its message count for a call of kind.
func (pc *planCost) of(alg algorithm, kind collKind) (lo, hi float64, msgs int) {
	sh, ok := pc.shape(alg, kind)
	if pr, seen := pc.seen[sh]; ok && seen {
		return pr.lo, pr.hi, pr.msgs
	}
	lo, hi, msgs = pc.price(alg, kind)
	if ok {
		pc.seen[sh] = planPrice{lo, hi, msgs}
	}
	return lo, hi, msgs
}

func (pc *planCost) price(alg algorithm, kind collKind) (lo, hi float64, msgs int) {
	c, n := pc.c, pc.b.n
	c.reset(pc.b.seg)
	pc.cost(c, alg, kind, n)
	lo, hi, m := c.result()
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return math.Inf(1), math.Inf(1), 0
	}
	return lo, hi, int(math.Min(m, math.MaxInt32))
}

func (pc *planCost) cost(c *coster, alg algorithm, kind collKind, n int) {
	alg, order := inOrder(alg, kind, pc.ranks)
	switch x := alg.(type) {
	case ring:
		c.seg = ringSegment(c.seg, n, len(order), c.elem)
		ringCost(c, kind, order, n)
	case butterfly:
		butterflyCost(c, kind, order, n, false)
	case binaryBlocks:
		binaryBlocksCost(c, kind, order, n)
	case recursiveDoubling:
		if kind == kindAllGather {
			c.seg = ringSegment(c.seg, n, len(pc.ranks), c.elem)
			ringCost(c, kind, pc.ranks, n)
			return
		}
		butterflyCost(c, kindAllReduce, order, n, true)
	case paramServer:
		if x.place == nil {
			x.place = pc.ranks[:x.k(len(pc.ranks))]
		}
		psCost(c, kind, placedPSNodes(c.net, x, n))
	case hierarchical:
		hierCost(c, kind, x, n, pc.hosts)
	default:
		c.addPhase(math.Inf(1), 0)
	}
}

// replayModel is model for a caller that does not hold a.mu.
func (a *auto) replayModel() *netModel {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.model()
}

// regular reports whether every host has as many ranks as every other and every rank pair of
// a host pair costs the same.
func (l *layout) regular() bool {
	for _, rs := range l.hosts {
		if len(rs) != len(l.hosts[0]) {
			return false
		}
	}
	return l.hm.Uniform
}

// newHostAuto is auto planning from a host-level description alone: what `hetsync plan` and
// the benchmarks use for networks whose full matrix would not fit.
func newHostAuto(hm *topology.HostMatrix) *auto {
	a := newAuto(Options{})
	a.lay = newHostLayout(hm)
	return a
}

// bucketKey is a size bucket of one call shape: sizes of [2^k, 2^(k+1)) elements.
type bucketKey struct {
	kind              collKind
	p, k, elem, segsz int
}

// fromBucket is the decision for b's call. Where auto prices from the closed forms alone,
// a size shares the decision of its bucket, sizes of [2^k, 2^(k+1)) elements, when both ends
// of the bucket choose the same candidate: every candidate's cost is affine in the size
// between them (α terms fixed, β terms proportional, at a fixed segment size, give or take a
// segment's rounding), so the difference of two candidates cannot change sign inside the
// bucket when it has the same sign at both ends. The size's own prediction is then that one
// candidate's. The first size of a bucket is decided on its own; the second prices the
// bucket's ends; the others price one candidate. Where the ends differ, or auto replays, every
// size is decided on its own. The caller holds a.mu.
func (a *auto) fromBucket(kind collKind, b *builder) autoChoice {
	if b.n < 2 || a.replays(b.p) || b.p <= planShortlistRanks {
		return a.choose(kind, b)
	}
	k := bits.Len(uint(b.n)) - 1
	key := bucketKey{kind: kind, p: b.p, k: k, elem: b.elemSize, segsz: b.seg * b.elemSize}
	bk, ok := a.buckets[key]
	switch {
	case !ok:
		if len(a.buckets) >= maxCachedSchedules {
			clear(a.buckets)
		}
		a.buckets[key] = bucket{}
		return a.choose(kind, b)
	case !bk.ends:
		lo, hi := *b, *b
		lo.n, hi.n = 1<<k, 1<<(k+1)-1
		bk.ends = true
		if l, h := a.choose(kind, &lo), a.choose(kind, &hi); l.name == h.name {
			bk.name = l.name
		}
		a.buckets[key] = bk
	}
	if bk.name == "" {
		return a.choose(kind, b)
	}
	for _, c := range a.candidates(kind) {
		if c.name == bk.name {
			return autoChoice{name: c.name, alg: c.alg, predicted: a.price(kind, b, []autoCandidate{c}).times[0]}
		}
	}
	return a.choose(kind, b)
}

// bucket is what auto knows of a size bucket: whether its ends are priced, and the candidate
// both chose ("" when they differ).
type bucket struct {
	ends bool
	name string
}
