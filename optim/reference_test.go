package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
)

// torchReference is testdata/torch_reference.json, which testdata/torch_reference.py wrote
// with torch.optim (its command is in the script).
type torchReference struct {
	N     int         `json:"n"`
	Steps int         `json:"steps"`
	Init  []float32   `json:"init"`
	Grads [][]float32 `json:"grads"`
	Cases []struct {
		Optimizer string `json:"optimizer"`
		Settings  struct {
			LR          float64  `json:"lr"`
			Momentum    float64  `json:"momentum"`
			Dampening   float64  `json:"dampening"`
			Nesterov    bool     `json:"nesterov"`
			Beta1       *float64 `json:"beta1"`
			Beta2       *float64 `json:"beta2"`
			Eps         *float64 `json:"eps"`
			WeightDecay float64  `json:"weight_decay"`
		} `json:"settings"`
		Params map[string][]float32 `json:"params"` // after the step its key names
		State  struct {
			Velocity []float32 `json:"velocity"`
			Steps    uint64    `json:"steps"`
			M        []float32 `json:"m"`
			V        []float32 `json:"v"`
		} `json:"state"`
	} `json:"cases"`
}

func readTorchReference(t *testing.T) *torchReference {
	t.Helper()
	b, err := os.ReadFile("testdata/torch_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref torchReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatalf("testdata/torch_reference.json: %v", err)
	}
	if len(ref.Init) != ref.N || len(ref.Grads) != ref.Steps || len(ref.Cases) == 0 {
		t.Fatalf("testdata/torch_reference.json: %d initial values for n %d, %d gradients for %d steps, %d cases", len(ref.Init), ref.N, len(ref.Grads), ref.Steps, len(ref.Cases))
	}
	return &ref
}

// torchTolerance bounds how far this package's values may lie from torch's: |got − want| ≤
// torchTolerance·(|want| + c), c being the coordinate's own scale (the largest magnitude its
// gradient took; its square for Adam's second moment), in units of float32's 2^-24. torch's
// CPU kernels fuse some multiply-adds (add with alpha), which Go does not on amd64, so single
// roundings differ, and over 30 steps of feedback through the velocity or the moments they add
// up; a coordinate whose velocity or moment cancels to near zero keeps its absolute error,
// which the scale c accounts for. Measured on testdata/torch_reference.json: at most 4.7 units
// (SGD with momentum and weight decay), 2.1 for Adam.
const torchTolerance = 16

// TestOptimizersMatchTorch runs each optimizer of Builtin on the gradients torch.optim was
// given and compares the parameters after the recorded steps and the final state with torch's.
func TestOptimizersMatchTorch(t *testing.T) {
	ref := readTorchReference(t)
	reg := Builtin()
	for i, c := range ref.Cases {
		t.Run(fmt.Sprintf("%d-%s", i, c.Optimizer), func(t *testing.T) {
			f, err := reg.Lookup(c.Optimizer)
			if err != nil {
				t.Fatal(err)
			}
			s := Settings{LR: c.Settings.LR, Momentum: c.Settings.Momentum, Dampening: c.Settings.Dampening,
				Nesterov: c.Settings.Nesterov, WeightDecay: c.Settings.WeightDecay,
				Beta1: f.Defaults.Beta1, Beta2: f.Defaults.Beta2, Eps: f.Defaults.Eps}
			for _, o := range []struct {
				p   *float64
				dst *float64
			}{{c.Settings.Beta1, &s.Beta1}, {c.Settings.Beta2, &s.Beta2}, {c.Settings.Eps, &s.Eps}} {
				if o.p != nil {
					*o.dst = *o.p
				}
			}
			opt, err := f.New(s)
			if err != nil {
				t.Fatal(err)
			}
			scale, scale2 := gradScales(ref.Grads)
			params := append([]float32(nil), ref.Init...)
			worst := 0.0
			for step := 1; step <= ref.Steps; step++ {
				opt.Step(params, ref.Grads[step-1], 1)
				if want, ok := c.Params[strconv.Itoa(step)]; ok {
					worst = max(worst, compareScaled(t, fmt.Sprintf("parameters after step %d", step), params, want, scale))
				}
			}
			switch o := opt.(type) {
			case *SGD:
				if len(c.State.Velocity) > 0 || len(o.Velocity) > 0 {
					worst = max(worst, compareScaled(t, "velocity", o.Velocity, c.State.Velocity, scale))
				}
			case *Adam:
				if o.Steps != c.State.Steps {
					t.Errorf("step count %d, torch's %d", o.Steps, c.State.Steps)
				}
				worst = max(worst, compareScaled(t, "first moment", o.M, c.State.M, scale))
				worst = max(worst, compareScaled(t, "second moment", o.V, c.State.V, scale2))
			}
			t.Logf("%s %+v: at most %.2g units from torch", c.Optimizer, s, worst)
		})
	}
}

// gradScales are each coordinate's largest gradient magnitude over grads, and its square.
func gradScales(grads [][]float32) (scale, scale2 []float64) {
	scale = make([]float64, len(grads[0]))
	scale2 = make([]float64, len(scale))
	for _, g := range grads {
		for i, x := range g {
			scale[i] = max(scale[i], math.Abs(float64(x)))
			scale2[i] = scale[i] * scale[i]
		}
	}
	return scale, scale2
}

// compareScaled fails t for each value of got further than torchTolerance from want's (see
// torchTolerance), and returns the largest distance seen, in its units.
func compareScaled(t *testing.T, what string, got, want []float32, scale []float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, torch has %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		diff := math.Abs(float64(got[i]) - float64(want[i]))
		d := 0.0
		if diff != 0 || math.IsNaN(diff) { // a coordinate whose gradient is always 0 has no scale
			d = diff / ((math.Abs(float64(want[i])) + scale[i]) * 0x1p-24)
		}
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		worst = max(worst, d)
		if d > torchTolerance {
			t.Errorf("%s [%d]: %v, torch %v (%.3g units apart)", what, i, got[i], want[i], d)
		}
	}
	return worst
}
