package nn

import (
	"fmt"
	"math"

	"github.com/hetsync/hetsync/kernels"
)

// SGD is stochastic gradient descent with momentum and weight decay, with exactly the update
// of PyTorch's torch.optim.SGD (no dampening, no Nesterov):
//
//	g = grad + WeightDecay·param;  v = Momentum·v + g;  param -= LR·v
//
// The momentum buffer lives in the optimizer; State and SetState carry it across a change of
// synchronization strategy. The update is elementwise and deterministic, so replicas that apply
// the same gradient to the same parameters stay bitwise identical.
type SGD struct {
	LR          float32
	Momentum    float32
	WeightDecay float32

	velocity []float32
}

// Validate reports hyper-parameters no run should use.
func (o *SGD) Validate() error {
	switch {
	case !(o.LR > 0) || math.IsInf(float64(o.LR), 0):
		return fmt.Errorf("nn: sgd: learning rate %v, want a positive finite value", o.LR)
	case !(o.Momentum >= 0 && o.Momentum < 1):
		return fmt.Errorf("nn: sgd: momentum %v, want 0 ≤ momentum < 1", o.Momentum)
	case !(o.WeightDecay >= 0) || math.IsInf(float64(o.WeightDecay), 0):
		return fmt.Errorf("nn: sgd: weight decay %v, want a non-negative finite value", o.WeightDecay)
	}
	return nil
}

// Step updates params in place from grads (host slices of equal length, e.g. Model.Params and
// Model.Grads on the CPU).
func (o *SGD) Step(params, grads []float32) error {
	if len(params) != len(grads) {
		return fmt.Errorf("nn: sgd: %d parameters but %d gradients", len(params), len(grads))
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Momentum != 0 && len(o.velocity) != len(params) {
		if o.velocity != nil {
			return fmt.Errorf("nn: sgd: momentum state holds %d values, step has %d", len(o.velocity), len(params))
		}
		o.velocity = make([]float32, len(params))
	}
	kernels.SGDStep(params, grads, o.velocity, o.LR, o.Momentum, o.WeightDecay)
	return nil
}

// StepModel updates m's parameters from its gradients. On host-memory devices it is Step on
// the live vectors; otherwise the gradients travel to the host and the parameters back.
func (o *SGD) StepModel(m *Model) error {
	if p, g := m.Params(), m.Grads(); p != nil && g != nil {
		return o.Step(p, g)
	}
	p, g := make([]float32, m.NumParams()), make([]float32, m.NumParams())
	if err := m.ParamsToHost(p); err != nil {
		return err
	}
	if err := m.GradsToHost(g); err != nil {
		return err
	}
	if err := o.Step(p, g); err != nil {
		return err
	}
	return m.ParamsFromHost(p)
}

// State returns a copy of the momentum buffer (nil before the first step or without momentum).
func (o *SGD) State() []float32 {
	if o.velocity == nil {
		return nil
	}
	return append([]float32(nil), o.velocity...)
}

// SetState replaces the momentum buffer with a copy of v (nil resets it to zeros on the next
// step).
func (o *SGD) SetState(v []float32) {
	if v == nil {
		o.velocity = nil
		return
	}
	o.velocity = append(o.velocity[:0], v...)
}
