package trainer

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/workload/nn"
)

// randomBatches repeats one random Fashion-MNIST-shaped batch.
type randomBatches struct {
	x []float32
	y []uint8
}

func (b *randomBatches) Next() ([]float32, []uint8, error) { return b.x, b.y, nil }

// benchPSRound times one round of a parameter-server strategy with the MLP on a one-rank
// in-process job (the rank is its own server), next to a bare local step: the difference is
// what the strategy adds per step on this machine.
func benchPSRound(b *testing.B, strategy string) {
	cfg := Config{Strategy: strategy, Collective: "ps", Batch: 64, LR: 0.05, Momentum: 0.9, MaxRounds: 1 << 30}
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, 1); err != nil {
		b.Fatal(err)
	}
	dev, err := kernels.NewCPU(1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := nn.NewModel("mlp", dev, cfg.Batch, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := &randomBatches{x: make([]float32, cfg.Batch*m.InputLen()), y: make([]uint8, cfg.Batch)}
	for i := range data.x {
		data.x[i] = rng.Float32()
	}
	ep := transport.NewMemJob(1)[0]
	defer ep.Close()
	w, err := newBatchWorker(&cfg, ep, nil, mlpNetwork{m}, data)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if strategy == "" {
		for b.Loop() {
			if _, err := w.LocalStep(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	s, err := NewStrategy(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(ctx, w); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Round(ctx, w, false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Round(ctx, w, true); err != nil {
		b.Fatal(err)
	}
	if err := s.Finish(ctx, w); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPSRoundMLP(b *testing.B) {
	for _, s := range []string{"", "wbsp", "wbsp-opt", "ssp", "dcasgd"} {
		name := s
		if name == "" {
			name = "local-step"
		}
		b.Run(name, func(b *testing.B) { benchPSRound(b, s) })
	}
}

// mlpNetwork is the MLP of workload/nn as a Network (package workload holds the same adapter
// for `hetsync train`, but it imports this package and so cannot serve its tests).
type mlpNetwork struct{ m *nn.Model }

func (a mlpNetwork) NumParams() int { return a.m.NumParams() }
func (a mlpNetwork) ForwardBackward(x []float32, labels []uint8) (float64, int, error) {
	return a.m.ForwardBackward(x, labels)
}
func (a mlpNetwork) ReadParams(dst []float32) error  { return a.m.ParamsToHost(dst) }
func (a mlpNetwork) WriteParams(src []float32) error { return a.m.ParamsFromHost(src) }
func (a mlpNetwork) ReadGrads(dst []float32) error   { return a.m.GradsToHost(dst) }
