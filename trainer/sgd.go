package trainer

// SGD is the workers' optimizer on the host parameter vector, with PyTorch's semantics
// (torch.optim.SGD without dampening or Nesterov):
//
//	g = gScale·grad + WeightDecay·param
//	v = Momentum·v + g       (no v when Momentum == 0)
//	param -= LR·v
//
// Its state (Velocity) is exported so strategies that switch or reset optimizers can carry or
// clear it. Replicas that apply the same gradients from the same state stay bitwise equal.
type SGD struct {
	LR, Momentum, WeightDecay float32
	Velocity                  []float32
}

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
	if len(o.Velocity) != len(params) {
		o.Velocity = make([]float32, len(params))
	}
	v, m := o.Velocity[:len(params)], o.Momentum
	for i, p := range params {
		v[i] = m*v[i] + gScale*grad[i] + wd*p
		params[i] = p - lr*v[i]
	}
}
