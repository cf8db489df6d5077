package optim

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Adam is torch.optim.Adam (without amsgrad), and with Decoupled torch.optim.AdamW: at step
// t (from 1), with g = scale·grad,
//
//	g = g + WeightDecay·param          (Adam: L2 penalty in the gradient)
//	param = param·(1 − LR·WeightDecay) (AdamW: decoupled decay, before the update)
//	m = Beta1·m + (1−Beta1)·g
//	v = Beta2·v + (1−Beta2)·g·g
//	param −= (LR/(1−Beta1^t) · m) / (√v/√(1−Beta2^t) + Eps)
//
// Eps is added outside the square root, after the bias correction, as torch does. The
// per-step scalars (the bias corrections and step size) are computed in float64 and rounded
// to float32 once, and every elementwise operation is float32 in torch's order, so the result
// follows torch's to within the rounding of fused multiply-adds torch's vector kernels use.
//
// The state is the step count and the two moment vectors.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	// Decoupled selects AdamW's decay.
	Decoupled bool
	// Steps is t, the steps taken; M and V are the first and second moments (empty before
	// the first step).
	Steps uint64
	M, V  []float32
}

// adamFactory builds Adam, or AdamW when decoupled. The defaults are torch's, except that
// AdamW's weight decay is --weight-decay's, 0 unless given (torch's AdamW defaults to 0.01).
func adamFactory(decoupled bool) Factory {
	name := (&Adam{Decoupled: decoupled}).Name()
	return Factory{
		Uses:     []string{SettingBeta1, SettingBeta2, SettingEps, SettingWeightDecay},
		Defaults: Settings{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		New: func(s Settings) (Optimizer, error) {
			if err := checkCommon(name, s); err != nil {
				return nil, err
			}
			switch {
			case !(s.Beta1 >= 0 && s.Beta1 < 1):
				return nil, fmt.Errorf("optim: %s: --beta1 must be in [0, 1), got %v", name, s.Beta1)
			case !(s.Beta2 >= 0 && s.Beta2 < 1):
				return nil, fmt.Errorf("optim: %s: --beta2 must be in [0, 1), got %v", name, s.Beta2)
			case !(s.Eps > 0) || math.IsInf(s.Eps, 0):
				return nil, fmt.Errorf("optim: %s: --eps must be a positive number, got %v", name, s.Eps)
			}
			return &Adam{LR: s.LR, Beta1: s.Beta1, Beta2: s.Beta2, Eps: s.Eps, WeightDecay: s.WeightDecay, Decoupled: decoupled}, nil
		},
	}
}

// Name is "adam", or "adamw" with Decoupled.
func (o *Adam) Name() string {
	if o.Decoupled {
		return "adamw"
	}
	return "adam"
}

// Step updates params in place.
func (o *Adam) Step(params, grad []float32, gScale float32) {
	n := len(params)
	grad = grad[:n]
	if len(o.M) != n || len(o.V) != n {
		o.M, o.V, o.Steps = make([]float32, n), make([]float32, n), 0
	}
	o.Steps++
	t := float64(o.Steps)
	stepSize := float32(-o.LR / (1 - math.Pow(o.Beta1, t)))
	bc2 := float32(math.Sqrt(1 - math.Pow(o.Beta2, t)))
	b1, c1 := float32(o.Beta1), float32(1-o.Beta1)
	b2, c2 := float32(o.Beta2), float32(1-o.Beta2)
	eps := float32(o.Eps)
	var l2, decay float32 = 0, 1
	if o.Decoupled {
		decay = float32(1 - o.LR*o.WeightDecay)
	} else {
		l2 = float32(o.WeightDecay)
	}
	m, v := o.M[:n], o.V[:n]
	for i, p := range params {
		g := gScale * grad[i]
		if l2 != 0 {
			g += l2 * p
		}
		if decay != 1 {
			p *= decay
		}
		m[i] = b1*m[i] + c1*g
		v[i] = b2*v[i] + c2*g*g
		den := float32(math.Sqrt(float64(v[i])))/bc2 + eps
		params[i] = p + stepSize*m[i]/den // torch's addcdiv: (value·m)/den
	}
}

// AppendState appends the step count (little-endian uint64) and the moments m and v (n
// little-endian float32 values each); nothing before the first step.
func (o *Adam) AppendState(b []byte) []byte {
	if o.Steps == 0 {
		return b
	}
	b = binary.LittleEndian.AppendUint64(b, o.Steps)
	return appendFloats(appendFloats(b, o.M), o.V)
}

// LoadState loads a state AppendState encoded.
func (o *Adam) LoadState(state []byte, n int) error {
	switch {
	case len(state) == 0:
		o.Steps, o.M, o.V = 0, nil, nil
		return nil
	case len(state) != 8+8*n:
		return fmt.Errorf("optim: %s: a state of %d bytes for %d parameters (want %d: a step count and two moments, or none)", o.Name(), len(state), n, 8+8*n)
	}
	steps := binary.LittleEndian.Uint64(state)
	if steps == 0 {
		return fmt.Errorf("optim: %s: a state of step 0 holding moments", o.Name())
	}
	o.Steps = steps
	o.M = readFloats(o.M[:0], state[8:8+4*n])
	o.V = readFloats(o.V[:0], state[8+4*n:])
	return nil
}
