package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/kernels"
)

func devices(t testing.TB) []kernels.Device {
	var out []kernels.Device
	for _, e := range kernels.GEMMEngines() {
		for _, th := range []int{1, 2} {
			d, err := kernels.NewCPUWith(kernels.CPUConfig{Threads: th, GEMM: e})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

func cpu1(t testing.TB) kernels.Device {
	d, err := kernels.NewCPU(1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func randomBatch(seed uint64, n, inLen, classes int) ([]float32, []uint8) {
	r := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n*inLen)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]uint8, n)
	for i := range y {
		y[i] = uint8(r.IntN(classes))
	}
	return x, y
}

func TestModelSizes(t *testing.T) {
	for _, c := range []struct {
		name   string
		params int
	}{{"mlp", 235146}, {"cnn", 454922}} {
		m, err := NewModel(c.name, cpu1(t), 4, 1)
		if err != nil {
			t.Fatal(err)
		}
		if m.NumParams() != c.params || len(m.Params()) != c.params || len(m.Grads()) != c.params {
			t.Errorf("%s: %d parameters (views %d, %d), want %d", c.name, m.NumParams(), len(m.Params()), len(m.Grads()), c.params)
		}
		if m.InputLen() != 784 || m.Classes() != 10 {
			t.Errorf("%s: input %d, classes %d", c.name, m.InputLen(), m.Classes())
		}
	}
	if _, err := NewModel("resnet", cpu1(t), 4, 1); err == nil || !strings.Contains(err.Error(), "cnn") {
		t.Errorf("unknown model: %v", err)
	}
}

// TestGradients compares ForwardBackward's gradient with central finite differences of the
// loss, for every parameter of small networks that use every layer.
func TestGradients(t *testing.T) {
	nets := []struct {
		name   string
		in     Shape
		layers []Layer
	}{
		{"dense", Shape{3, 1, 1}, []Layer{Dense(4)}},
		{"mlp", Shape{1, 2, 3}, []Layer{Flatten(), Dense(5), ReLU(), Dense(4), ReLU(), Dense(3)}},
		// Wide enough for the SIMD paths: a 17-wide Dense packs its transposed weights with
		// the AVX-512 gather (16 rows) plus one row, and its ReLU runs 48 of 51 values in SSE.
		{"wide", Shape{1, 4, 5}, []Layer{Flatten(), Dense(17), ReLU(), Dense(3)}},
		{"cnn", Shape{2, 8, 8}, []Layer{
			Conv2D(3, 5, 2), ReLU(), MaxPool2D(),
			Conv2D(4, 3, 1), ReLU(), MaxPool2D(),
			Flatten(), Dense(5), ReLU(), Dense(3),
		}},
	}
	for _, d := range devices(t) {
		for _, n := range nets {
			t.Run(fmt.Sprintf("%s/%s", d.Name(), n.name), func(t *testing.T) {
				const batch = 3
				m, err := NewSequential(d, n.in, batch, 7, n.layers...)
				if err != nil {
					t.Fatal(err)
				}
				// Non-zero biases, so their gradients flow through the ReLUs in a general way.
				for i := range m.Params() {
					if m.Params()[i] == 0 {
						m.Params()[i] = 0.05 * float32(i%7-3)
					}
				}
				x, y := randomBatch(3, batch, n.in.Len(), m.Classes())
				if _, _, err := m.ForwardBackward(x, y); err != nil {
					t.Fatal(err)
				}
				analytic := slices.Clone(m.Grads())
				numeric := make([]float64, len(analytic))
				p := m.Params()
				const h = 1e-3
				for i := range p {
					old := p[i]
					p[i] = old + h
					up, _, err := m.Evaluate(x, y)
					if err != nil {
						t.Fatal(err)
					}
					p[i] = old - h
					down, _, _ := m.Evaluate(x, y)
					p[i] = old
					numeric[i] = (up - down) / (2 * h)
				}
				var diff, norm float64
				for i := range numeric {
					diff += (float64(analytic[i]) - numeric[i]) * (float64(analytic[i]) - numeric[i])
					norm += (float64(analytic[i]) + numeric[i]) * (float64(analytic[i]) + numeric[i])
				}
				rel := math.Sqrt(diff / norm)
				t.Logf("relative error %.3g", rel)
				if !(rel < 2e-3) {
					t.Errorf("relative gradient error %.3g (analytic %v…, numeric %v…)", rel, analytic[:4], numeric[:4])
				}
			})
		}
	}
}

// TestDeterministic: the same seed and data give bitwise-identical parameters after training,
// and a different seed gives different ones.
func TestDeterministic(t *testing.T) {
	for _, name := range []string{"mlp", "cnn"} {
		run := func(seed uint64) []float32 {
			d, err := kernels.NewCPU(2)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewModel(name, d, 8, seed)
			if err != nil {
				t.Fatal(err)
			}
			opt := &SGD{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-4}
			for step := range 3 {
				x, y := randomBatch(uint64(step), 8, 784, 10)
				if _, _, err := m.ForwardBackward(x, y); err != nil {
					t.Fatal(err)
				}
				if err := opt.StepModel(m); err != nil {
					t.Fatal(err)
				}
			}
			return slices.Clone(m.Params())
		}
		a, b, c := run(1), run(1), run(2)
		if !slices.Equal(a, b) {
			t.Errorf("%s: two runs with seed 1 differ", name)
		}
		if slices.Equal(a, c) {
			t.Errorf("%s: seeds 1 and 2 give the same parameters", name)
		}
	}
}

// TestLearns trains the MLP on a synthetic task (the label is which of ten input regions has
// the largest mean) and expects the loss to fall and accuracy to rise well above chance.
func TestLearns(t *testing.T) {
	d := cpu1(t)
	m, err := NewModel("mlp", d, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	data := func(n int) ([]float32, []uint8) {
		x := make([]float32, n*784)
		y := make([]uint8, n)
		for i := range y {
			y[i] = uint8(r.IntN(10))
			for j := 0; j < 784; j++ {
				x[i*784+j] = float32(r.NormFloat64()) * 0.5
				if j/78 == int(y[i]) {
					x[i*784+j] += 1
				}
			}
		}
		return x, y
	}
	tx, ty := data(200)
	before, _, err := m.Evaluate(tx, ty)
	if err != nil {
		t.Fatal(err)
	}
	opt := &SGD{LR: 0.05, Momentum: 0.9}
	for range 40 {
		x, y := data(32)
		if _, _, err := m.ForwardBackward(x, y); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(m.Params(), m.Grads()); err != nil {
			t.Fatal(err)
		}
	}
	after, correct, err := m.Evaluate(tx, ty)
	if err != nil {
		t.Fatal(err)
	}
	if !(after < before/2) || correct < 150 {
		t.Errorf("loss %.3f → %.3f, %d/200 correct", before, after, correct)
	}
}

func TestEvaluateMatchesBatches(t *testing.T) {
	d := cpu1(t)
	m, err := NewModel("cnn", d, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	x, y := randomBatch(1, 10, 784, 10) // 4 + 4 + 2
	loss, correct, err := m.Evaluate(x, y)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	want := 0
	for lo := 0; lo < 10; lo += 4 {
		hi := min(10, lo+4)
		l, c, err := m.ForwardBackward(x[lo*784:hi*784], y[lo:hi])
		if err != nil {
			t.Fatal(err)
		}
		sum += l * float64(hi-lo)
		want += c
	}
	if math.Abs(loss-sum/10) > 1e-6 || correct != want {
		t.Errorf("Evaluate = %v, %d; batches give %v, %d", loss, correct, sum/10, want)
	}
}

func TestBadInput(t *testing.T) {
	d := cpu1(t)
	m, err := NewModel("mlp", d, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, y := randomBatch(1, 4, 784, 10)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"too many samples", func() error { _, _, err := m.ForwardBackward(append(x, x...), append(y, y...)); return err }(), "want 1..4"},
		{"short input", func() error { _, _, err := m.ForwardBackward(x[:100], y); return err }(), "input values"},
		{"bad label", func() error { _, _, err := m.ForwardBackward(x, []uint8{1, 2, 10, 3}); return err }(), "label 10"},
		{"params length", m.ParamsFromHost(make([]float32, 5)), "235146"},
		{"sgd lengths", (&SGD{LR: 0.1}).Step(make([]float32, 3), make([]float32, 2)), "3 parameters but 2"},
		{"sgd lr", (&SGD{LR: 0}).Step(nil, nil), "learning rate"},
		{"sgd momentum", (&SGD{LR: 1, Momentum: 1}).Step(nil, nil), "momentum"},
		{"pool odd", func() error { _, err := NewSequential(d, Shape{1, 5, 5}, 1, 1, MaxPool2D()); return err }(), "even"},
		{"conv too big", func() error { _, err := NewSequential(d, Shape{1, 2, 2}, 1, 1, Conv2D(1, 5, 0)); return err }(), "layer 0"},
		{"batch 0", func() error { _, err := NewModel("mlp", d, 0, 1); return err }(), "batch"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}

func TestSGDState(t *testing.T) {
	a := &SGD{LR: 0.1, Momentum: 0.9}
	p, g := []float32{1, 2}, []float32{0.5, -1}
	if err := a.Step(p, g); err != nil {
		t.Fatal(err)
	}
	// Carry the momentum into a fresh optimizer: both must then take the same step.
	b := &SGD{LR: 0.1, Momentum: 0.9}
	b.SetState(a.State())
	p2 := slices.Clone(p)
	if err := a.Step(p, g); err != nil {
		t.Fatal(err)
	}
	if err := b.Step(p2, g); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p, p2) {
		t.Errorf("after carrying state: %v vs %v", p, p2)
	}
	// v = 0.9·0.5 + 0.5 = 0.95 on the second step; p = 1 − 0.05 − 0.095.
	if want := float32(1) - 0.1*0.5 - 0.1*(0.9*0.5+0.5); math.Abs(float64(p[0]-want)) > 1e-6 {
		t.Errorf("p[0] = %v, want %v", p[0], want)
	}
}

// BenchmarkTrainStep measures one training step (forward, backward, SGD update) at batch 64 on
// one thread, the PyTorch anchor's setting, for every available GEMM engine.
func BenchmarkTrainStep(b *testing.B) {
	for _, name := range []string{"mlp", "cnn"} {
		for _, e := range kernels.GEMMEngines() {
			b.Run(fmt.Sprintf("%s/%s", name, e), func(b *testing.B) {
				d, err := kernels.NewCPUWith(kernels.CPUConfig{Threads: 1, GEMM: e})
				if err != nil {
					b.Fatal(err)
				}
				m, err := NewModel(name, d, 64, 1)
				if err != nil {
					b.Fatal(err)
				}
				x, y := randomBatch(1, 64, 784, 10)
				opt := &SGD{LR: 0.01}
				b.ReportAllocs()
				cpu0 := processCPUTime()
				for b.Loop() {
					if _, _, err := m.ForwardBackward(x, y); err != nil {
						b.Fatal(err)
					}
					if err := opt.Step(m.Params(), m.Grads()); err != nil {
						b.Fatal(err)
					}
				}
				cpu := processCPUTime() - cpu0
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
				// CPU time per step (process-wide, so it includes the collector): the work a
				// step costs, unaffected by waiting for a core on a shared host.
				b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/step")
			})
		}
	}
}

// TestStepAllocatesNothing: after the first step has grown the workspaces, a training step
// (forward, backward, SGD) on one thread allocates nothing.
func TestStepAllocatesNothing(t *testing.T) {
	for _, name := range []string{"mlp", "cnn"} {
		for _, e := range kernels.GEMMEngines() {
			d, err := kernels.NewCPUWith(kernels.CPUConfig{Threads: 1, GEMM: e})
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewModel(name, d, 8, 1)
			if err != nil {
				t.Fatal(err)
			}
			x, y := randomBatch(1, 8, 784, 10)
			opt := &SGD{LR: 0.01, Momentum: 0.9}
			step := func() {
				if _, _, err := m.ForwardBackward(x, y); err != nil {
					t.Fatal(err)
				}
				if err := opt.Step(m.Params(), m.Grads()); err != nil {
					t.Fatal(err)
				}
			}
			step()
			if n := testing.AllocsPerRun(2, step); n != 0 {
				t.Errorf("%s on %s: %v allocations per step", name, d.Name(), n)
			}
		}
	}
}
