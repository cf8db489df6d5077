package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/optim"
	"github.com/hetsync/hetsync/transport"
)

// Model is what strategies train: the user's model as one flat float32 parameter vector and
// a step that computes the gradient of the model's own next batch. The model owns its data,
// batching, loss and device; labels may be of any type, or none.
//
// The trainer calls Params once, before training, and from then on owns the returned slice:
// strategies update it in place between steps (optimizer steps, pulled or averaged models),
// and every Step must compute its gradient at the slice's current contents (a device model
// uploads it). Params and Step are called from one goroutine.
type Model interface {
	// Params returns the parameter vector, holding the initial parameters (Run replaces
	// every other rank's with rank 0's before the first step). Its length is the length of
	// every gradient.
	Params() []float32
	// Step takes the model's next batch and writes the gradient of its mean loss at the
	// current parameters into grad (len(Params())). It reports the batch's mean loss, its
	// size and, for classifiers, the correct predictions.
	Step(ctx context.Context, grad []float32) (StepResult, error)
}

// StepResult is what one Model.Step saw.
type StepResult struct {
	Loss    float64 // mean loss over the batch
	Samples int     // batch size
	Correct int     // correct predictions (classifiers; 0 otherwise: train_acc is then 0)
}

// Network is a classifier over uint8 labels that keeps its parameters and gradients itself,
// as workload/nn's models do; with a Batches iterator, NewBatchModel makes it a Model.
type Network interface {
	// NumParams is the length of the parameter (and gradient) vector.
	NumParams() int
	// ForwardBackward runs one batch and leaves the gradient of the mean loss over the batch
	// in the network; it returns the mean loss and the number of correct predictions.
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

// NewBatchModel adapts a network and its batches to Model: each Step loads the parameters
// into the network, runs the next batch and reads the gradient back.
func NewBatchModel(net Network, data Batches) (Model, error) {
	if net == nil || data == nil {
		return nil, fmt.Errorf("trainer: a batch model needs a network and batches")
	}
	m := &batchModel{net: net, data: data, params: make([]float32, net.NumParams())}
	if err := net.ReadParams(m.params); err != nil {
		return nil, fmt.Errorf("trainer: reading the initial parameters: %w", err)
	}
	return m, nil
}

// batchModel is NewBatchModel's Model.
type batchModel struct {
	net    Network
	data   Batches
	params []float32
}

func (m *batchModel) Params() []float32 { return m.params }

func (m *batchModel) Step(ctx context.Context, grad []float32) (StepResult, error) {
	if err := m.net.WriteParams(m.params); err != nil {
		return StepResult{}, fmt.Errorf("loading parameters: %w", err)
	}
	x, labels, err := m.data.Next()
	if err != nil {
		return StepResult{}, fmt.Errorf("next batch: %w", err)
	}
	loss, correct, err := m.net.ForwardBackward(x, labels)
	if err != nil {
		return StepResult{}, fmt.Errorf("forward/backward: %w", err)
	}
	if err := m.net.ReadGrads(grad); err != nil {
		return StepResult{}, fmt.Errorf("reading gradients: %w", err)
	}
	return StepResult{Loss: loss, Samples: len(labels), Correct: correct}, nil
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
	// Opt is the run's optimizer (Config.Optimizer), which Apply steps.
	Opt    Optimizer
	Inject *Injector
	Now    func() time.Time
	// Timeline, when not nil, gets a span per local step (collective.Timeline).
	Timeline *collective.Timeline

	// Params is the model's parameter vector (Model.Params), which strategies update in
	// place; Grads receives the gradient of each local step, already scaled to
	// GradReduction.
	Params []float32
	Grads  []float32

	gradScale  float32
	steps      uint64
	optimizers *optim.Registry // what Config.Optimizer names, for strategies' local optimizers
}

// NewWorker assembles a worker around the model's parameter vector, with cfg's optimizer
// from the built-in ones (optim.Builtin). comm may be nil for strategies that do not need
// collectives.
func NewWorker(cfg *Config, ep transport.Endpoint, comm Collective, m Model) (*Worker, error) {
	return newWorker(cfg, ep, comm, m, optim.Builtin())
}

// newWorker is NewWorker with cfg's optimizer from opts.
func newWorker(cfg *Config, ep transport.Endpoint, comm Collective, m Model, opts *optim.Registry) (*Worker, error) {
	if ep == nil || m == nil {
		return nil, fmt.Errorf("trainer: worker needs an endpoint and a model")
	}
	params := m.Params()
	if len(params) == 0 {
		return nil, fmt.Errorf("trainer: rank %d: the model has no parameters", ep.Rank())
	}
	n := len(params)
	opt, err := newOptimizer(opts, cfg, cfg.LR, cfg.Momentum)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %w", ep.Rank(), err)
	}
	w := &Worker{
		Rank: ep.Rank(), Size: ep.Size(), Cfg: cfg, Endpoint: ep, Comm: comm, Model: m,
		Opt:       opt,
		Inject:    NewInjector(cfg, ep.Rank()),
		Now:       time.Now,
		Params:    params,
		Grads:     make([]float32, n),
		gradScale: 1, optimizers: opts,
	}
	if cfg.GradReduction == "sum" {
		w.gradScale = float32(cfg.Batch)
	}
	return w, nil
}

// StepStats describes one local step.
type StepStats struct {
	Loss     float64
	Correct  int
	Samples  int
	Compute  time.Duration // the model's step and the injected slowdown
	Injected time.Duration
}

// LocalStep runs the model's step and leaves the scaled gradient in w.Grads; then it sleeps as the heterogeneity injector says. It does not update Params.
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
	r, err := w.Model.Step(ctx, w.Grads)
	if err != nil {
		return StepStats{}, fmt.Errorf("trainer: rank %d: step %d: %w", w.Rank, w.steps, err)
	}
	if w.gradScale != 1 {
		scale(w.Grads, w.gradScale)
	}
	compute := w.Now().Sub(t0)
	extra := w.Inject.Extra(compute)
	w.steps++
	w.Timeline.Span(collective.TrackUser, "step", time.Now().Add(-compute), time.Now(), "step", w.steps, "loss", r.Loss)
	return StepStats{Loss: r.Loss, Correct: r.Correct, Samples: r.Samples, Compute: compute + extra, Injected: extra}, nil
}

// Steps is the number of local steps this worker has taken.
func (w *Worker) Steps() uint64 { return w.steps }

// Apply takes one step of the run's optimizer with gradient g·gScale on Params.
func (w *Worker) Apply(g []float32, gScale float32) {
	w.Opt.Step(w.Params, g, gScale)
}

func scale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}
