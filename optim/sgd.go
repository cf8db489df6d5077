package optim

import (
	"fmt"
	"math"
)

// SGD is stochastic gradient descent with torch.optim.SGD's semantics: with g = scale·grad
// and d = g + WeightDecay·param,
//
//	v = d                           (first step)
//	v = Momentum·v + (1−Dampening)·d (later steps)
//	d = d + Momentum·v  (Nesterov)  or  d = v
//	param −= LR·d
//
// and without momentum param −= LR·d. Without dampening or Nesterov, the form every
// strategy has always used, the update is the same arithmetic it always was (one velocity
// from zeros, v = Momentum·v + g + WeightDecay·param), which equals the above but rounds the
// sum in its own order: runs without the new settings give bitwise the results they gave
// before the optimizers became plug-ins.
//
// Its fields are exported so strategies that carry or reset momentum (Sync-Switch) can; the
// state is Velocity (empty before the first step and without momentum).
type SGD struct {
	LR, Momentum, Dampening, WeightDecay float32
	Nesterov                             bool
	Velocity                             []float32
}

func sgdFactory() Factory {
	return Factory{
		Uses: []string{SettingMomentum, SettingDampening, SettingNesterov, SettingWeightDecay},
		New: func(s Settings) (Optimizer, error) {
			if err := checkCommon("sgd", s); err != nil {
				return nil, err
			}
			switch {
			case !(s.Momentum >= 0 && s.Momentum < 1):
				return nil, fmt.Errorf("optim: sgd: --momentum must be in [0, 1), got %v", s.Momentum)
			case !(s.Dampening >= 0 && s.Dampening <= 1):
				return nil, fmt.Errorf("optim: sgd: --dampening must be in [0, 1], got %v", s.Dampening)
			case s.Nesterov && (s.Momentum == 0 || s.Dampening != 0):
				return nil, fmt.Errorf("optim: sgd: --nesterov needs --momentum > 0 and --dampening 0, got momentum %v and dampening %v", s.Momentum, s.Dampening)
			}
			return &SGD{LR: float32(s.LR), Momentum: float32(s.Momentum), Dampening: float32(s.Dampening),
				Nesterov: s.Nesterov, WeightDecay: float32(s.WeightDecay)}, nil
		},
	}
}

// checkCommon checks the settings every built-in optimizer reads: the learning rate and the
// weight decay.
func checkCommon(name string, s Settings) error {
	switch {
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("optim: %s: --lr must be a positive number, got %v", name, s.LR)
	case !(s.WeightDecay >= 0) || math.IsInf(s.WeightDecay, 0):
		return fmt.Errorf("optim: %s: --weight-decay must be a finite number ≥ 0, got %v", name, s.WeightDecay)
	}
	return nil
}

// Name is "sgd".
func (o *SGD) Name() string { return "sgd" }

// Step updates params in place.
func (o *SGD) Step(params, grad []float32, gScale float32) {
	grad = grad[:len(params)]
	lr, wd := o.LR, o.WeightDecay
	if o.Momentum == 0 {
		for i, p := range params {
			params[i] = p - lr*(gScale*grad[i]+wd*p)
		}
		return
	}
	if o.Dampening != 0 || o.Nesterov {
		o.stepTorch(params, grad, gScale)
		return
	}
	if len(o.Velocity) != len(params) {
		o.Velocity = make([]float32, len(params))
	}
	v, m := o.Velocity[:len(params)], o.Momentum
	for i, p := range params {
		v[i] = m*v[i] + gScale*grad[i] + wd*p
		params[i] = p - lr*v[i]
	}
}

// stepTorch is the momentum step with dampening or Nesterov, in torch's order of operations;
// its first step takes the velocity to be the gradient itself, undamped, as torch does.
func (o *SGD) stepTorch(params, grad []float32, gScale float32) {
	first := len(o.Velocity) != len(params)
	if first {
		o.Velocity = make([]float32, len(params))
	}
	v := o.Velocity[:len(params)]
	lr, wd, m, keep := o.LR, o.WeightDecay, o.Momentum, 1-o.Dampening
	for i, p := range params {
		d := gScale*grad[i] + wd*p
		if first {
			v[i] = d
		} else {
			v[i] = m*v[i] + keep*d
		}
		if o.Nesterov {
			d += m * v[i]
		} else {
			d = v[i]
		}
		params[i] = p - lr*d
	}
}

// AppendState appends the velocity, n little-endian float32 values (none before the first
// step or without momentum).
func (o *SGD) AppendState(b []byte) []byte { return appendFloats(b, o.Velocity) }

// LoadState loads a velocity AppendState encoded.
func (o *SGD) LoadState(state []byte, n int) error {
	switch {
	case len(state) == 0:
		o.Velocity = nil
		return nil
	case len(state) != 4*n:
		return fmt.Errorf("optim: sgd: a state of %d bytes for %d parameters (want %d bytes of velocity, or none)", len(state), n, 4*n)
	case o.Momentum == 0:
		return fmt.Errorf("optim: sgd: the state holds SGD momentum (%d velocity values), and this optimizer has --momentum 0", n)
	}
	o.Velocity = readFloats(o.Velocity[:0], state)
	return nil
}
