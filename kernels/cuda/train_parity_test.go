//go:build cuda || cudaemu

package cuda

// A full training step of each model of the zoo on the GPU against the CPU backend: the same
// seed gives the same initial parameters on both devices; forward, loss, backward (every
// layer's kernels: GEMM, bias, ReLU, conv, pooling, softmax cross-entropy) and three SGD
// updates with momentum and weight decay on the device must agree within the tolerances
// below (relative to max(1, max|cpu|) over the whole vector).

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/workload/nn"
)

func TestTrainingStepParity(t *testing.T) {
	const (
		batch, steps            = 32, 3
		lr, mom, wd             = 0.05, 0.9, 5e-4
		lossTol, gradTol        = 1e-4, 1e-4
		paramTol                = 1e-5
		seed             uint64 = 7
	)
	gpu, err := New(Config{Device: "cuda:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	cpu, err := kernels.NewCPU(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range nn.Models() {
		cm, err := nn.NewModel(name, cpu, batch, seed)
		if err != nil {
			t.Fatal(err)
		}
		gm, err := nn.NewModel(name, gpu, batch, seed)
		if err != nil {
			t.Fatal(err)
		}
		np := cm.NumParams()
		cp, gp := make([]float32, np), make([]float32, np)
		mustOK(t, cm.ParamsToHost(cp))
		mustOK(t, gm.ParamsToHost(gp))
		compare(t, name+" initial params", gp, cp, 0)
		cv, _ := cpu.Alloc(np)
		gv, _ := gpu.Alloc(np)
		rng := rand.New(rand.NewPCG(seed, 1))
		for s := 0; s < steps; s++ {
			x := make([]float32, batch*cm.InputLen())
			for i := range x {
				x[i] = rng.Float32()
			}
			labels := make([]uint8, batch)
			for i := range labels {
				labels[i] = uint8(rng.IntN(cm.Classes()))
			}
			closs, ccor, err := cm.ForwardBackward(x, labels)
			mustOK(t, err)
			gloss, gcor, err := gm.ForwardBackward(x, labels)
			mustOK(t, err)
			if math.Abs(gloss-closs) > lossTol*math.Max(1, math.Abs(closs)) {
				t.Fatalf("%s step %d: loss %v, cpu %v", name, s, gloss, closs)
			}
			if gcor != ccor {
				t.Errorf("%s step %d: %d correct, cpu %d (a near-tie can flip one)", name, s, gcor, ccor)
			}
			cg, gg := make([]float32, np), make([]float32, np)
			mustOK(t, cm.GradsToHost(cg))
			mustOK(t, gm.GradsToHost(gg))
			compare(t, name+" grads", gg, cg, gradTol)
			cpu.SGD(cm.ParamsTensor(), cm.GradsTensor(), cv, lr, mom, wd)
			gpu.SGD(gm.ParamsTensor(), gm.GradsTensor(), gv, lr, mom, wd)
			mustOK(t, cpu.Sync())
			mustOK(t, gpu.Sync())
			mustOK(t, cm.ParamsToHost(cp))
			mustOK(t, gm.ParamsToHost(gp))
			compare(t, name+" params after SGD", gp, cp, paramTol)
		}
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func compare(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	scale, worst, at := 1.0, 0.0, 0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) || d > worst {
			worst, at = d, i
		}
	}
	if math.IsNaN(worst) || worst > tol*scale {
		t.Fatalf("%s: [%d] = %v, want %v (|diff| %.3g, allowed %.3g)", what, at, got[at], want[at], worst, tol*scale)
	}
}
