package optim

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// reference64 is an independent float64 implementation of the three rules, written from
// their definitions in torch's documentation rather than from this package's code.
type reference64 struct {
	name string
	s    Settings
	t    int
	buf  []float64 // SGD's velocity, nil before the first step
	m, v []float64
}

func (r *reference64) step(p []float64, g []float32) {
	switch r.name {
	case "sgd":
		first := r.buf == nil
		if first {
			r.buf = make([]float64, len(p))
		}
		for i := range p {
			d := float64(g[i]) + r.s.WeightDecay*p[i]
			if r.s.Momentum != 0 {
				if first {
					r.buf[i] = d
				} else {
					r.buf[i] = r.s.Momentum*r.buf[i] + (1-r.s.Dampening)*d
				}
				if r.s.Nesterov {
					d += r.s.Momentum * r.buf[i]
				} else {
					d = r.buf[i]
				}
			}
			p[i] -= r.s.LR * d
		}
	default:
		if r.m == nil {
			r.m, r.v = make([]float64, len(p)), make([]float64, len(p))
		}
		r.t++
		for i := range p {
			d := float64(g[i])
			if r.name == "adam" {
				d += r.s.WeightDecay * p[i]
			} else {
				p[i] *= 1 - r.s.LR*r.s.WeightDecay
			}
			r.m[i] = r.s.Beta1*r.m[i] + (1-r.s.Beta1)*d
			r.v[i] = r.s.Beta2*r.v[i] + (1-r.s.Beta2)*d*d
			mHat := r.m[i] / (1 - math.Pow(r.s.Beta1, float64(r.t)))
			vHat := r.v[i] / (1 - math.Pow(r.s.Beta2, float64(r.t)))
			p[i] -= r.s.LR * mHat / (math.Sqrt(vHat) + r.s.Eps)
		}
	}
}

// referenceCases are settings of every optimizer, every option exercised.
var referenceCases = []struct {
	name string
	s    Settings
}{
	{"sgd", Settings{LR: 0.1}},
	{"sgd", Settings{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}},
	{"sgd", Settings{LR: 0.05, Momentum: 0.8, Dampening: 0.3}},
	{"sgd", Settings{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2}},
	{"adam", Settings{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}},
	{"adam", Settings{LR: 0.01, Beta1: 0.5, Beta2: 0.9, Eps: 1e-6, WeightDecay: 0.1}},
	{"adamw", Settings{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05}},
}

// fixedGradients is a deterministic sequence of gradients of n values: varied signs and
// scales, one coordinate always zero.
func fixedGradients(steps, n int) [][]float32 {
	g := make([][]float32, steps)
	for t := range g {
		g[t] = make([]float32, n)
		for i := range g[t] {
			if i == 3 {
				continue
			}
			g[t][i] = float32(math.Sin(float64(7*t+3*i+1)) * math.Pow(10, -float64(i%4)))
		}
	}
	return g
}

// TestOptimizersMatchFloat64Reference runs each optimizer and the float64 reference on the
// same fixed gradients: the float32 parameters stay within 2^-16 of the reference's, relative
// to the parameter's magnitude plus one (measured: at most 2^-18.6 after 200 steps; float32's own
// rounding of each step is 2^-24).
func TestOptimizersMatchFloat64Reference(t *testing.T) {
	const n, steps = 29, 200
	grads := fixedGradients(steps, n)
	reg := Builtin()
	for _, tc := range referenceCases {
		t.Run(fmt.Sprintf("%s %+v", tc.name, tc.s), func(t *testing.T) {
			opt, err := reg.New(tc.name, tc.s)
			if err != nil {
				t.Fatal(err)
			}
			p32 := make([]float32, n)
			p64 := make([]float64, n)
			for i := range p32 {
				p32[i] = float32(math.Cos(float64(i)))
				p64[i] = float64(p32[i])
			}
			ref := &reference64{name: tc.name, s: tc.s}
			worst := 0.0
			for st := range steps {
				opt.Step(p32, grads[st], 1)
				ref.step(p64, grads[st])
				for i := range p32 {
					worst = max(worst, math.Abs(float64(p32[i])-p64[i])/(math.Abs(p64[i])+1))
				}
			}
			if worst > 0x1p-16 {
				t.Fatalf("float32 parameters %.3g (relative) from the float64 reference, want ≤ 2^-16", worst)
			}
			t.Logf("at most %.3g (2^%.1f) from the float64 reference", worst, math.Log2(worst))
		})
	}
}

// legacySGD is the trainer's SGD step before optimizers were plug-ins, kept as the
// reference that the default path's arithmetic has not changed.
func legacySGD(params, grad, velocity []float32, lr, momentum, wd, gScale float32) {
	if momentum == 0 {
		for i, p := range params {
			params[i] = p - lr*(gScale*grad[i]+wd*p)
		}
		return
	}
	for i, p := range params {
		velocity[i] = momentum*velocity[i] + gScale*grad[i] + wd*p
		params[i] = p - lr*velocity[i]
	}
}

// TestSGDDefaultIsBitwiseLegacy: SGD without dampening or Nesterov computes bitwise what the
// trainer's SGD always computed, so default runs give the results they gave before.
func TestSGDDefaultIsBitwiseLegacy(t *testing.T) {
	const n, steps = 31, 50
	grads := fixedGradients(steps, n)
	for _, s := range []Settings{{LR: 0.1}, {LR: 0.05, Momentum: 0.9}, {LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}} {
		opt, err := Builtin().New("sgd", s)
		if err != nil {
			t.Fatal(err)
		}
		got, want, vel := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range got {
			got[i] = float32(i) / 7
			want[i] = got[i]
		}
		for st := range steps {
			gScale := float32(1)
			if st%3 == 0 {
				gScale = 1 / float32(3) // the mean of three ranks' summed gradients (sync-switch)
			}
			opt.Step(got, grads[st], gScale)
			legacySGD(want, grads[st], vel, float32(s.LR), float32(s.Momentum), float32(s.WeightDecay), gScale)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: parameters differ from the legacy SGD's", s)
		}
		if s.Momentum != 0 && !slices.Equal(opt.(*SGD).Velocity, vel) {
			t.Fatalf("%+v: velocity differs from the legacy SGD's", s)
		}
	}
}

// TestStateRoundTripIsExact: an optimizer rebuilt from another's AppendState after k steps
// continues bitwise as the original does, for every optimizer and option.
func TestStateRoundTripIsExact(t *testing.T) {
	const n, steps, k = 17, 40, 13
	grads := fixedGradients(steps, n)
	reg := Builtin()
	for _, tc := range referenceCases {
		a, _ := reg.New(tc.name, tc.s)
		b, _ := reg.New(tc.name, tc.s)
		pa, pb := make([]float32, n), make([]float32, n)
		for st := range steps {
			if st == k {
				copy(pb, pa)
				if err := b.LoadState(a.AppendState(nil), n); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
			}
			a.Step(pa, grads[st], 1)
			if st >= k {
				b.Step(pb, grads[st], 1)
			}
		}
		if !slices.Equal(pa, pb) || !bytes.Equal(a.AppendState(nil), b.AppendState(nil)) {
			t.Fatalf("%s %+v: the restored optimizer diverged from the uninterrupted one", tc.name, tc.s)
		}
	}
}

func TestLoadStateRefusesWhatItCannotContinue(t *testing.T) {
	reg := Builtin()
	sgd, _ := reg.New("sgd", Settings{LR: 0.1, Momentum: 0.9})
	plain, _ := reg.New("sgd", Settings{LR: 0.1})
	adam, _ := reg.New("adam", Settings{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	p, g := make([]float32, 4), []float32{1, 2, 3, 4}
	sgd.Step(p, g, 1)
	adam.Step(p, g, 1)
	for _, tc := range []struct {
		name  string
		opt   Optimizer
		state []byte
		n     int
		want  string
	}{
		{"sgd of another length", sgd, sgd.AppendState(nil), 5, "16 bytes for 5 parameters"},
		{"momentum into plain sgd", plain, sgd.AppendState(nil), 4, "--momentum 0"},
		{"adam's into sgd", sgd, adam.AppendState(nil), 4, "40 bytes for 4 parameters"},
		{"sgd's into adam", adam, sgd.AppendState(nil), 4, "16 bytes for 4 parameters"},
		{"adam at step 0", adam, make([]byte, 40), 4, "step 0"},
	} {
		err := tc.opt.LoadState(tc.state, tc.n)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if err := adam.LoadState(nil, 4); err != nil || len(adam.AppendState(nil)) != 0 {
		t.Fatalf("empty state: %v, state %d bytes after", err, len(adam.AppendState(nil)))
	}
}

func TestSettingsRefusedNameTheFlag(t *testing.T) {
	reg := Builtin()
	adam := Settings{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	for _, tc := range []struct {
		name string
		s    Settings
		want string
	}{
		{"sgd", Settings{}, "--lr"},
		{"sgd", Settings{LR: 0.1, Momentum: 1}, "--momentum"},
		{"sgd", Settings{LR: 0.1, Momentum: 0.9, Dampening: 1.5}, "--dampening"},
		{"sgd", Settings{LR: 0.1, Nesterov: true}, "--nesterov needs --momentum > 0"},
		{"sgd", Settings{LR: 0.1, Momentum: 0.9, Dampening: 0.1, Nesterov: true}, "--nesterov needs"},
		{"sgd", Settings{LR: 0.1, WeightDecay: -1}, "--weight-decay"},
		{"adam", Settings{LR: 0.1, Beta1: 1, Beta2: 0.9, Eps: 1e-8}, "adam: --beta1"},
		{"adamw", Settings{LR: 0.1, Beta1: 0.9, Beta2: -0.1, Eps: 1e-8}, "adamw: --beta2"},
		{"adam", Settings{LR: 0.1, Beta1: 0.9, Beta2: 0.9}, "--eps"},
		{"adamw", Settings{LR: math.Inf(1), Beta1: 0.9, Beta2: 0.9, Eps: 1}, "--lr"},
		{"lion", adam, `unknown optimizer "lion" (known: adam, adamw, sgd)`},
	} {
		_, err := reg.New(tc.name, tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: got %v, want an error saying %q", tc.name, tc.s, err, tc.want)
		}
	}
	if _, err := reg.New("adam", adam); err != nil {
		t.Fatal(err)
	}
}

// signSGD is a program's own optimizer: the kind Register takes.
type signSGD struct{ lr float32 }

func (o *signSGD) Name() string { return "signsgd" }
func (o *signSGD) Step(params, grads []float32, scale float32) {
	for i := range params {
		switch g := scale * grads[i]; {
		case g > 0:
			params[i] -= o.lr
		case g < 0:
			params[i] += o.lr
		}
	}
}
func (o *signSGD) AppendState(b []byte) []byte { return b }
func (o *signSGD) LoadState(state []byte, n int) error {
	if len(state) != 0 {
		return fmt.Errorf("signsgd keeps no state, got %d bytes", len(state))
	}
	return nil
}

func TestRegistry(t *testing.T) {
	reg := Builtin()
	f := Factory{New: func(s Settings) (Optimizer, error) { return &signSGD{lr: float32(s.LR)}, nil }}
	if err := reg.Register("signsgd", f); err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); !slices.Equal(got, []string{"adam", "adamw", "sgd", "signsgd"}) {
		t.Fatalf("names %v", got)
	}
	o, err := reg.New("signsgd", Settings{LR: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{0, 0, 0}
	o.Step(p, []float32{1, -1, 0}, 1)
	if !slices.Equal(p, []float32{-0.5, 0.5, 0}) {
		t.Fatalf("signsgd step: %v", p)
	}
	if len(Builtin().Names()) != 3 {
		t.Fatal("Register changed another registry: Builtin must return a fresh one")
	}
	for _, tc := range []struct {
		name string
		f    Factory
		want string
	}{
		{"", f, "empty name"},
		{"x", Factory{}, "needs New"},
		{"sgd", f, "registered twice"},
		{"y", Factory{Uses: []string{"beta3"}, New: f.New}, `uses "beta3", not a setting`},
	} {
		if err := reg.Register(tc.name, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%q): got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
