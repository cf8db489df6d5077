package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// Model is what strategies train: a network over one flat float32 parameter vector. The
// trainer keeps the authoritative host copy of the parameters (Worker.Params) and moves it to
// and from the model, so device models only need the copies.
type Model interface {
	// NumParams is the length of the parameter (and gradient) vector.
	NumParams() int
	// ForwardBackward runs one batch and leaves the gradient of the mean loss over the batch
	// in the model; it returns the mean loss and the number of correct predictions.
	ForwardBackward(x []float32, labels []uint8) (loss float64, correct int, err error)
	// ReadParams copies the parameters into dst; WriteParams loads them from src.
	ReadParams(dst []float32) error
	WriteParams(src []float32) error
	// ReadGrads copies the gradient of the last ForwardBackward into dst.
	ReadGrads(dst []float32) error
}

// Batches yields a rank's training batches in a deterministic order.
type Batches interface {
	// Next returns the next batch; the slices stay valid until the next call.
	Next() (x []float32, labels []uint8, err error)
}

// Collective is the part of collective.Comm that synchronous strategies use.
type Collective interface {
	AllReduce(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error
	Barrier(ctx context.Context) error
}

// Worker is one rank's trainer state, shared by every strategy.
type Worker struct {
	Rank, Size int
	Cfg        *Config
	Endpoint   transport.Endpoint
	Comm       Collective // synchronous strategies; nil for the others
	Model      Model
	Data       Batches
	Opt        *SGD
	Inject     *Injector
	Now        func() time.Time

	// Params is the authoritative host copy of the model parameters between rounds; Grads
	// receives the gradient of each local step, already scaled to GradReduction.
	Params []float32
	Grads  []float32

	gradScale float32
	steps     uint64
}

// NewWorker assembles a worker and reads the model's initial parameters. comm may be nil
// for strategies that do not need collectives.
func NewWorker(cfg *Config, ep transport.Endpoint, comm Collective, m Model, data Batches) (*Worker, error) {
	if ep == nil || m == nil || data == nil {
		return nil, fmt.Errorf("trainer: worker needs an endpoint, a model and a data iterator")
	}
	n := m.NumParams()
	w := &Worker{
		Rank: ep.Rank(), Size: ep.Size(), Cfg: cfg, Endpoint: ep, Comm: comm, Model: m, Data: data,
		Opt:       &SGD{LR: float32(cfg.LR), Momentum: float32(cfg.Momentum), WeightDecay: float32(cfg.WeightDecay)},
		Inject:    NewInjector(cfg, ep.Rank()),
		Now:       time.Now,
		Params:    make([]float32, n),
		Grads:     make([]float32, n),
		gradScale: 1,
	}
	if cfg.GradReduction == "sum" {
		w.gradScale = float32(cfg.Batch)
	}
	if err := m.ReadParams(w.Params); err != nil {
		return nil, fmt.Errorf("trainer: rank %d: reading the initial parameters: %w", w.Rank, err)
	}
	return w, nil
}

// StepStats describes one local step.
type StepStats struct {
	Loss     float64
	Correct  int
	Samples  int
	Compute  time.Duration // batch fetch, forward/backward and the injected slowdown
	Injected time.Duration
}

// LocalStep fetches the next batch, runs forward/backward and leaves the scaled gradient in
// w.Grads; then it sleeps as the heterogeneity injector says. It does not update Params.
func (w *Worker) LocalStep(ctx context.Context) (StepStats, error) {
	ls, err := w.Compute(ctx)
	if err != nil {
		return StepStats{}, err
	}
	if err := w.Inject.Sleep(ctx, ls.Injected); err != nil {
		return StepStats{}, err
	}
	return ls, nil
}

// Compute is LocalStep without the injected sleep, for a caller that sleeps ls.Injected
// itself (and may cut it short): ls.Compute already counts the sleep.
func (w *Worker) Compute(ctx context.Context) (StepStats, error) {
	t0 := w.Now()
	x, labels, err := w.Data.Next()
	if err != nil {
		return StepStats{}, fmt.Errorf("trainer: rank %d: next batch: %w", w.Rank, err)
	}
	loss, correct, err := w.Model.ForwardBackward(x, labels)
	if err != nil {
		return StepStats{}, fmt.Errorf("trainer: rank %d: step %d: forward/backward: %w", w.Rank, w.steps, err)
	}
	if err := w.Model.ReadGrads(w.Grads); err != nil {
		return StepStats{}, fmt.Errorf("trainer: rank %d: reading gradients: %w", w.Rank, err)
	}
	if w.gradScale != 1 {
		scale(w.Grads, w.gradScale)
	}
	compute := w.Now().Sub(t0)
	extra := w.Inject.Extra(compute)
	w.steps++
	return StepStats{Loss: loss, Correct: correct, Samples: len(labels), Compute: compute + extra, Injected: extra}, nil
}

// Steps is the number of local steps this worker has taken.
func (w *Worker) Steps() uint64 { return w.steps }

// Apply takes one optimizer step with gradient g·gScale on Params and loads the result
// into the model.
func (w *Worker) Apply(g []float32, gScale float32) error {
	w.Opt.Step(w.Params, g, gScale)
	return w.Load()
}

// Load copies Params into the model.
func (w *Worker) Load() error {
	if err := w.Model.WriteParams(w.Params); err != nil {
		return fmt.Errorf("trainer: rank %d: loading parameters: %w", w.Rank, err)
	}
	return nil
}

func scale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}
