package kv

import (
	"fmt"
	"math"
	"time"

	"github.com/hetsync/hetsync/kernels"
)

// WBSP is the server rule of Worker-Busy Synchronous Parallel (Yang et al., Parallel
// Computing 2024). Workers never wait: after every local step they push that step's model
// change Δ = w_after − w_before and go on. The global model changes only when the slowest
// worker uploads (the trigger); workers take the new global model with their next push after
// the trigger (Service.PushPullIfNewer).
//
// Buffered (the default, the paper's wording): a push adds Δ to an accumulator; the
// slowest worker's push folds the accumulator into w (w ← w + A/N, A ← 0) and publishes a
// version, so every pulled model is a trigger-time model and no fast worker's later delta
// leaks into one worker's copy but not another's. Immediate (the code, ps_wbsp.py): a push
// adds Δ/N to w at once; the slowest worker's push still publishes the version that tells the
// workers to pull.
//
// The slowest worker is pinned with PinSlow/SlowRank (the code hard-codes rank 1), or found
// at run time by a SlowDetector from the intervals between each worker's pushes. Until every
// worker has pushed twice (no interval known yet), every push triggers.
type WBSP struct {
	Immediate bool
	PinSlow   bool
	SlowRank  int
	// Scale multiplies each Δ; 0 means 1/N with N the number of workers.
	Scale float32
	// Alpha and Margin configure the detector (see SlowDetector); 0 picks the defaults.
	Alpha, Margin float64
	// Now is the detector's clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports settings that cannot work.
func (r WBSP) Validate() error {
	if r.PinSlow && r.SlowRank < 0 {
		return fmt.Errorf("kv: WBSP slow rank must be ≥ 0, got %d", r.SlowRank)
	}
	if r.Scale < 0 || math.IsNaN(float64(r.Scale)) || math.IsInf(float64(r.Scale), 0) {
		return fmt.Errorf("kv: WBSP scale must be a finite number ≥ 0 (0 means 1/N), got %v", r.Scale)
	}
	if r.Alpha < 0 || r.Alpha > 1 || math.IsNaN(r.Alpha) {
		return fmt.Errorf("kv: WBSP detector alpha must be in [0, 1] (0 means %.2g), got %v", defaultAlpha, r.Alpha)
	}
	if r.Margin < 0 || math.IsNaN(r.Margin) || math.IsInf(r.Margin, 0) {
		return fmt.Errorf("kv: WBSP detector margin must be ≥ 0 (0 means %.2g), got %v", defaultMargin, r.Margin)
	}
	return nil
}

// Factory returns a RuleFactory: each shard gets its accumulator and detector.
func (r WBSP) Factory() RuleFactory {
	return func(s *Shard) (Rule, error) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if r.PinSlow && r.SlowRank >= s.Workers {
			return nil, fmt.Errorf("kv: WBSP slow rank %d out of range for %d workers", r.SlowRank, s.Workers)
		}
		st := &wbspShard{cfg: r, scale: r.Scale, now: r.Now}
		if st.scale == 0 {
			st.scale = 1 / float32(max(1, s.Workers))
		}
		if st.now == nil {
			st.now = time.Now
		}
		if !r.Immediate {
			st.acc = make([]float32, len(s.W))
		}
		if !r.PinSlow {
			st.det = NewSlowDetector(s.Workers, r.Alpha, r.Margin)
		}
		return st, nil
	}
}

type wbspShard struct {
	cfg   WBSP
	scale float32
	now   func() time.Time
	acc   []float32 // buffered mode: Σ Δ since the last trigger (scaled when published)
	det   *SlowDetector
}

func (b *wbspShard) Push(s *Shard, p Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("kv: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	if p.Worker < 0 || p.Worker >= s.Workers {
		return false, fmt.Errorf("kv: shard %d: push from rank %d, outside the %d workers", s.Index, p.Worker, s.Workers)
	}
	var trigger bool
	if b.cfg.PinSlow {
		trigger = p.Worker == b.cfg.SlowRank
	} else {
		slow := b.det.Observe(p.Worker, p.Clock, b.now())
		trigger = slow < 0 || p.Worker == slow
	}
	if b.acc == nil {
		addScaled(s.W, p.G, b.scale)
		return trigger, nil
	}
	// The accumulator holds ΣΔ unscaled, so that a push is one vector add at memory speed
	// (the pushing worker waits for it); the trigger scales the sum once: w ← w + scale·ΣΔ.
	kernels.ReduceAdd(b.acc, p.G)
	if !trigger {
		return false, nil
	}
	w := s.W
	acc := b.acc[:len(w)]
	a := b.scale
	for i := range w {
		w[i] += a * acc[i]
		acc[i] = 0
	}
	return true, nil
}

// Pulled does nothing: a pull returns the last published model.
func (*wbspShard) Pulled(*Shard, int) {}

const (
	defaultAlpha  = 0.3
	defaultMargin = 0.1
)

// SlowDetector finds the slowest worker from the times of its pushes: each worker's time per
// step (the interval between two pushes divided by the clock advance between them) is
// smoothed with an exponential moving average of weight Alpha on the newest interval; the
// slowest is the worker with the largest average, and it changes only when another worker's
// average exceeds the current one's by more than Margin (a fraction), so that two equally slow
// workers do not take turns triggering.
type SlowDetector struct {
	alpha, margin float64
	ema           []float64 // seconds per step; 0 = unknown
	last          []time.Time
	lastClock     []uint64
	seen          []bool
	slow          int
}

// NewSlowDetector returns a detector for workers workers; alpha and margin 0 pick the
// defaults (0.3 and 0.1).
func NewSlowDetector(workers int, alpha, margin float64) *SlowDetector {
	if alpha == 0 {
		alpha = defaultAlpha
	}
	if margin == 0 {
		margin = defaultMargin
	}
	return &SlowDetector{
		alpha: alpha, margin: margin,
		ema: make([]float64, workers), last: make([]time.Time, workers),
		lastClock: make([]uint64, workers), seen: make([]bool, workers), slow: -1,
	}
}

// Observe records worker's push at clock (its completed steps) at time at and returns the
// slowest worker, or -1 while some worker's time per step is still unknown.
func (d *SlowDetector) Observe(worker int, clock uint64, at time.Time) int {
	if worker < 0 || worker >= len(d.ema) {
		return d.slow
	}
	if d.seen[worker] && clock > d.lastClock[worker] {
		per := at.Sub(d.last[worker]).Seconds() / float64(clock-d.lastClock[worker])
		per = max(per, 1e-9) // a known estimate is never 0
		if d.ema[worker] == 0 {
			d.ema[worker] = per
		} else {
			d.ema[worker] = d.alpha*per + (1-d.alpha)*d.ema[worker]
		}
	}
	if !d.seen[worker] || clock > d.lastClock[worker] {
		d.seen[worker], d.last[worker], d.lastClock[worker] = true, at, clock
	}
	d.slow = PickSlowest(d.ema, d.slow, d.margin)
	return d.slow
}

// Slowest is the current slowest worker, -1 while unknown.
func (d *SlowDetector) Slowest() int { return d.slow }

// PickSlowest is the detector's decision: -1 while some estimate is unknown (≤ 0); else the
// worker with the largest time per step (the lowest rank among equals), except that the
// current slowest keeps its place unless that worker's estimate exceeds its own by more than
// margin·estimate.
func PickSlowest(perStep []float64, current int, margin float64) int {
	if len(perStep) == 0 {
		return -1
	}
	arg := 0
	for i, v := range perStep {
		if !(v > 0) {
			return -1
		}
		if v > perStep[arg] {
			arg = i
		}
	}
	if current >= 0 && current < len(perStep) && perStep[arg] <= perStep[current]*(1+margin) {
		return current
	}
	return arg
}
