package kv

import (
	"fmt"
	"math"
)

// DCASGD is delay-compensated asynchronous SGD (Zheng et al., ICML'17): a push g from worker
// m, computed at the model w_bak(m) that m last pulled, updates
//
//	w ← w − LR·(g + Lambda·g⊙g⊙(w − w_bak(m)))
//
// where λ·g⊙g is a diagonal approximation of the Hessian in a first-order Taylor correction of
// the stale gradient. The shard keeps one backup per worker (the paper), taken when the worker
// pulls, and starts every backup at the initial model.
//
// Shared selects MXNet's optimizer.DCASGD (the one ESync ran): one previous_weight per shard,
// shared by all workers, equal to the weights before the last update by any worker; each push
// computes its step against it and then sets it to the weights it is about to change. The
// compensation then covers a one-update lag only.
type DCASGD struct {
	LR     float32
	Lambda float32
	Scale  float32 // gradient normalisation folded into g (0 means 1)
	Shared bool    // MXNet's single previous_weight instead of per-worker backups
}

// Validate reports parameters that cannot train.
func (r DCASGD) Validate() error {
	if !(r.LR > 0) || math.IsInf(float64(r.LR), 0) {
		return fmt.Errorf("kv: DC-ASGD learning rate must be a positive finite number, got %v", r.LR)
	}
	if !(r.Lambda >= 0) || math.IsInf(float64(r.Lambda), 0) {
		return fmt.Errorf("kv: DC-ASGD lambda must be a finite number ≥ 0, got %v", r.Lambda)
	}
	if r.Scale < 0 || math.IsNaN(float64(r.Scale)) || math.IsInf(float64(r.Scale), 0) {
		return fmt.Errorf("kv: DC-ASGD scale must be a finite number ≥ 0 (0 means 1), got %v", r.Scale)
	}
	return nil
}

// Factory returns a RuleFactory: each shard gets its backups, copied from its initial values.
func (r DCASGD) Factory() RuleFactory {
	return func(s *Shard) (Rule, error) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		st := &dcasgdShard{cfg: r}
		if r.Shared {
			st.bak = [][]float32{append([]float32(nil), s.W...)}
		} else {
			st.bak = make([][]float32, s.Workers)
			for m := range st.bak {
				st.bak[m] = append([]float32(nil), s.W...)
			}
		}
		return st, nil
	}
}

type dcasgdShard struct {
	cfg DCASGD
	bak [][]float32 // per worker (paper) or one shared previous_weight (MXNet)
}

func (d *dcasgdShard) Push(s *Shard, p Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("kv: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	var bak []float32
	if d.cfg.Shared {
		bak = d.bak[0]
	} else {
		if p.Worker < 0 || p.Worker >= len(d.bak) {
			return false, fmt.Errorf("kv: shard %d: push from rank %d, but the shard keeps backups for %d workers", s.Index, p.Worker, len(d.bak))
		}
		bak = d.bak[p.Worker]
	}
	lr, lam, sc := d.cfg.LR, d.cfg.Lambda, d.cfg.Scale
	if sc == 0 {
		sc = 1
	}
	w := s.W
	g := p.G[:len(w)]
	bak = bak[:len(w)]
	for i := range w {
		gi := sc * g[i]
		wi := w[i]
		step := lr * (gi + lam*gi*gi*(wi-bak[i]))
		if d.cfg.Shared {
			bak[i] = wi // previous_weight ← the weights before this update
		}
		w[i] = wi - step
	}
	return true, nil
}

// Pulled records the pulled model as the worker's backup (paper variant).
func (d *dcasgdShard) Pulled(s *Shard, worker int) {
	if d.cfg.Shared || worker < 0 || worker >= len(d.bak) {
		return
	}
	copy(d.bak[worker], s.W)
}
