package kv

import (
	"fmt"
	"math"
)

// Delta adds pushed model changes: w ← w + Scale·Δ on every push (Scale 1/N gives the
// ADSP/SSP code's "w += Δ/N"). Workers push Δ = their local model change since their last
// push, so momentum or any other local optimizer works unchanged.
type Delta struct {
	Scale float32 // 0 means 1
}

// Validate reports a scale that cannot train.
func (r Delta) Validate() error {
	if r.Scale < 0 || math.IsNaN(float64(r.Scale)) || math.IsInf(float64(r.Scale), 0) {
		return fmt.Errorf("kv: delta scale must be a finite number ≥ 0 (0 means 1), got %v", r.Scale)
	}
	return nil
}

// Factory returns a RuleFactory for this rule (stateless, shared by the shards).
func (r Delta) Factory() RuleFactory {
	return func(*Shard) (Rule, error) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		return r, nil
	}
}

// Push applies w ← w + Scale·Δ.
func (r Delta) Push(s *Shard, p Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("kv: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	addScaled(s.W, p.G, scaleOr1(r.Scale))
	return true, nil
}

// Pulled does nothing.
func (Delta) Pulled(*Shard, int) {}

func scaleOr1(a float32) float32 {
	if a == 0 {
		return 1
	}
	return a
}

// addScaled is dst += a·x.
func addScaled(dst, x []float32, a float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}
