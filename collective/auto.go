package collective

import "math"

// auto picks an algorithm per call from the α-β simulator (see Predict): for each candidate it
// builds the schedules of all p ranks for this (collective, n, dtype), replays them with
// AutoAlpha and AutoBeta, and runs the fastest. Candidates: allreduce — recursive doubling
// (latency-optimal, wins for small messages), butterfly, binary-blocks, ring; reduce-scatter and
// allgather — butterfly, binary-blocks, ring. Ties go to the earlier candidate. ps is never
// chosen (it has the ring's volume in the model but is incast-sensitive on real networks).
// Every rank computes the same choice from the same inputs, and the decision is cached per
// (collective, n, element size).
//
// In practice (α = 30 µs, 10 Gb/s): recursive doubling below a few KiB; butterfly for powers of
// two above; binary-blocks or ring for other p depending on the block shape (e.g. p = 9, 8 + 1,
// goes to the ring for large messages).
type auto struct {
	opts   Options
	choice map[autoKey]algorithm
}

// The cost-model constants auto uses: per-message latency (s) and per-byte time (s/B, 10 Gb/s).
const (
	AutoAlpha = 30e-6
	AutoBeta  = 1 / 1.25e9
)

type autoKey struct {
	kind              collKind
	p, n, elem, segsz int
}

func newAuto(opts Options) *auto { return &auto{opts: opts, choice: make(map[autoKey]algorithm)} }

func (a *auto) pick(kind collKind, b *builder) algorithm {
	key := autoKey{kind: kind, p: b.p, n: b.n, elem: b.elemSize, segsz: b.seg * b.elemSize}
	if alg, ok := a.choice[key]; ok {
		return alg
	}
	cands := []algorithm{butterfly{}, binaryBlocks{}, ring{}}
	if kind == kindAllReduce {
		cands = append([]algorithm{recursiveDoubling{}}, cands...)
	}
	best, bestT := cands[len(cands)-1], math.Inf(1)
	for _, alg := range cands {
		t, err := simulateKind(alg, kind, b.p, b.n, b.elemSize, b.seg*b.elemSize, AutoAlpha, AutoBeta)
		if err != nil {
			continue
		}
		if t < bestT {
			best, bestT = alg, t
		}
	}
	if len(a.choice) >= maxCachedSchedules {
		clear(a.choice)
	}
	a.choice[key] = best
	return best
}

func (a *auto) allReduce(b *builder)     { a.pick(kindAllReduce, b).allReduce(b) }
func (a *auto) reduceScatter(b *builder) { a.pick(kindReduceScatter, b).reduceScatter(b) }
func (a *auto) allGather(b *builder)     { a.pick(kindAllGather, b).allGather(b) }
