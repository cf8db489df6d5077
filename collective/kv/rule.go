package kv

import (
	"fmt"
	"math"
)

// Shard is one server shard as an update rule sees it. The server holds the shard's lock while
// it calls the rule, so a rule may read and write W freely and keep its own state.
type Shard struct {
	Index   int       // shard index in [0, number of servers)
	Offset  int       // position of W[0] in the full model vector
	W       []float32 // the shard's current values
	Workers int       // number of workers (ranks) that may push
	Version uint64    // updates published so far
}

// Push describes one worker's push as the rule sees it.
type Push struct {
	Worker    int       // pushing rank
	Clock     uint64    // the worker's clock (completed steps) when it pushed
	Staleness uint64    // shard updates published since the worker's last pull
	G         []float32 // pushed values for this shard (a gradient for SGD)
}

// Rule is a server-side update rule for one shard. Rules are per shard: NewRule is called once
// per shard hosted by a rank.
type Rule interface {
	// Push folds a worker's push into s.W. It returns true when s.W changed so that the shard
	// publishes a new version (an accumulating rule such as WBSP's returns false until it
	// publishes).
	Push(s *Shard, p Push) (published bool, err error)
	// Pulled is called when worker pulls s.W (DC-ASGD keeps the pulled model as its backup).
	Pulled(s *Shard, worker int)
}

// RuleFactory builds the rule state of one shard.
type RuleFactory func(s *Shard) (Rule, error)

// SGD is the textbook asynchronous rule: w ← w − LR·Scale·g on every push, applied at once.
// Scale lets the caller fold a gradient normalisation (for example the batch size under the
// summed-gradient convention) into the update without touching the pushed vector.
type SGD struct {
	LR    float32
	Scale float32 // 0 means 1
}

// Validate reports a learning rate that cannot train.
func (r SGD) Validate() error {
	if !(r.LR > 0) || math.IsInf(float64(r.LR), 0) {
		return fmt.Errorf("kv: SGD learning rate must be a positive finite number, got %v", r.LR)
	}
	if r.Scale < 0 || math.IsNaN(float64(r.Scale)) || math.IsInf(float64(r.Scale), 0) {
		return fmt.Errorf("kv: SGD scale must be a finite number ≥ 0 (0 means 1), got %v", r.Scale)
	}
	return nil
}

// Factory returns a RuleFactory for this rule (the rule is stateless, so shards share it).
func (r SGD) Factory() RuleFactory {
	return func(*Shard) (Rule, error) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		return r, nil
	}
}

// Push applies w ← w − LR·Scale·g.
func (r SGD) Push(s *Shard, p Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("kv: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	a := r.LR
	if r.Scale != 0 {
		a *= r.Scale
	}
	w := s.W
	g := p.G[:len(w)]
	for i := range w {
		w[i] -= a * g[i]
	}
	return true, nil
}

// Pulled does nothing: plain SGD keeps no per-worker state.
func (SGD) Pulled(*Shard, int) {}
