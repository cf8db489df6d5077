package nn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/hetsync/hetsync/kernels"
)

// Model is a sequential network ending in a softmax cross-entropy loss, with every parameter
// in one flat float32 vector on its device and the gradients in a second vector of the same
// layout (layer by layer, each layer's weights then its biases). One collective call therefore
// moves a whole model or a whole gradient. A Model is not safe for concurrent use.
type Model struct {
	name     string
	dev      kernels.Device
	in       Shape
	classes  int
	maxBatch int
	nparams  int
	params   kernels.Tensor
	grads    kernels.Tensor
	layers   []boundLayer
	specs    []Layer
	offsets  []int // parameter offset of each layer

	input   kernels.Tensor
	labels  kernels.Tensor
	dlogits kernels.Tensor
	labHost []int32
}

// modelZoo maps a model name to its layers and input shape.
var modelZoo = map[string]func() (Shape, []Layer){
	// 784-256-128-10, 235,146 parameters.
	"mlp": func() (Shape, []Layer) {
		return Shape{C: 1, H: 28, W: 28}, []Layer{Flatten(), Dense(256), ReLU(), Dense(128), ReLU(), Dense(10)}
	},
	// LeNet-style, as the PyTorch anchor: 454,922 parameters.
	"cnn": func() (Shape, []Layer) {
		return Shape{C: 1, H: 28, W: 28}, []Layer{
			Conv2D(32, 5, 2), ReLU(), MaxPool2D(),
			Conv2D(64, 5, 2), ReLU(), MaxPool2D(),
			Flatten(), Dense(128), ReLU(), Dense(10),
		}
	},
}

// Models lists the names NewModel knows.
func Models() []string {
	names := make([]string, 0, len(modelZoo))
	for n := range modelZoo {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewModel builds a named model ("mlp" or "cnn", 28×28×1 inputs, 10 classes) on dev for batches
// of up to batch samples, with parameters initialised from seed.
func NewModel(name string, dev kernels.Device, batch int, seed uint64) (*Model, error) {
	mk, ok := modelZoo[name]
	if !ok {
		return nil, fmt.Errorf("nn: unknown model %q; known models: %v", name, Models())
	}
	in, layers := mk()
	m, err := NewSequential(dev, in, batch, seed, layers...)
	if err != nil {
		return nil, err
	}
	m.name = name
	return m, nil
}

// NewSequential builds a model from layers applied in order to inputs of shape in. The last
// layer's output size is the number of classes. Parameters are Glorot-uniform (biases zero),
// drawn from a generator seeded by seed, so equal seeds give bitwise-equal models.
func NewSequential(dev kernels.Device, in Shape, batch int, seed uint64, layers ...Layer) (*Model, error) {
	if dev == nil {
		return nil, errors.New("nn: nil device")
	}
	if batch <= 0 {
		return nil, fmt.Errorf("nn: batch = %d, want > 0", batch)
	}
	if in.C <= 0 || in.H <= 0 || in.W <= 0 {
		return nil, fmt.Errorf("nn: input shape %v must be positive", in)
	}
	if len(layers) == 0 {
		return nil, errors.New("nn: a model needs at least one layer")
	}
	m := &Model{name: "sequential", dev: dev, in: in, maxBatch: batch, specs: layers}
	shapes := []Shape{in}
	cur := in
	for i, l := range layers {
		out, np, err := l.plan(cur)
		if err != nil {
			return nil, fmt.Errorf("nn: layer %d: %w", i, err)
		}
		m.offsets = append(m.offsets, m.nparams)
		m.nparams += np
		cur = out
		shapes = append(shapes, out)
	}
	m.classes = cur.Len()
	var err error
	if m.params, err = dev.Alloc(m.nparams); err != nil {
		return nil, err
	}
	if m.grads, err = dev.Alloc(m.nparams); err != nil {
		return nil, err
	}
	host := make([]float32, m.nparams)
	for i, l := range layers {
		end := m.nparams
		if i+1 < len(layers) {
			end = m.offsets[i+1]
		}
		pv, err := dev.View(m.params, m.offsets[i], end-m.offsets[i])
		if err != nil {
			return nil, err
		}
		gv, err := dev.View(m.grads, m.offsets[i], end-m.offsets[i])
		if err != nil {
			return nil, err
		}
		b, err := l.build(dev, shapes[i], batch, pv, gv, i)
		if err != nil {
			return nil, fmt.Errorf("nn: layer %d (%v): %w", i, l, err)
		}
		// One generator per layer, so adding a layer does not reshuffle the others.
		b.initParams(host[m.offsets[i]:end], rand.New(rand.NewPCG(seed, uint64(i))))
		m.layers = append(m.layers, b)
	}
	if err := dev.Upload(m.params, host); err != nil {
		return nil, err
	}
	if m.input, err = dev.Alloc(batch * in.Len()); err != nil {
		return nil, err
	}
	if m.labels, err = dev.AllocIndex(batch); err != nil {
		return nil, err
	}
	if m.dlogits, err = dev.Alloc(batch * m.classes); err != nil {
		return nil, err
	}
	m.labHost = make([]int32, batch)
	if err := dev.Sync(); err != nil {
		return nil, fmt.Errorf("nn: building model: %w", err)
	}
	return m, nil
}

// Name is the model's name ("mlp", "cnn" or "sequential").
func (m *Model) Name() string { return m.name }

// Device is the device the model lives on.
func (m *Model) Device() kernels.Device { return m.dev }

// NumParams is the length of the flat parameter (and gradient) vector.
func (m *Model) NumParams() int { return m.nparams }

// InputLen is the number of input values per sample.
func (m *Model) InputLen() int { return m.in.Len() }

// Classes is the number of output classes.
func (m *Model) Classes() int { return m.classes }

// Batch is the largest batch ForwardBackward accepts.
func (m *Model) Batch() int { return m.maxBatch }

// String lists the layers.
func (m *Model) String() string {
	return fmt.Sprintf("%s %v→%v (%d parameters)", m.name, m.in, m.specs, m.nparams)
}

// Params is the live flat parameter vector when the device keeps tensors in host memory (the
// CPU), so collectives and optimizers can work on it in place; nil otherwise (use ParamsToHost
// and ParamsFromHost).
func (m *Model) Params() []float32 {
	h, _ := kernels.HostView(m.params)
	return h
}

// Grads is the live flat gradient vector on host-memory devices, nil otherwise (GradsToHost).
func (m *Model) Grads() []float32 {
	h, _ := kernels.HostView(m.grads)
	return h
}

// ParamsTensor is the flat parameter vector as a device tensor.
func (m *Model) ParamsTensor() kernels.Tensor { return m.params }

// GradsTensor is the flat gradient vector as a device tensor.
func (m *Model) GradsTensor() kernels.Tensor { return m.grads }

func (m *Model) checkLen(what string, n int) error {
	if n != m.nparams {
		return fmt.Errorf("nn: %s: %d values, model %s has %d parameters", what, n, m.name, m.nparams)
	}
	return nil
}

// ParamsToHost copies the parameters into dst (len NumParams).
func (m *Model) ParamsToHost(dst []float32) error {
	if err := m.checkLen("params to host", len(dst)); err != nil {
		return err
	}
	return m.dev.Download(dst, m.params)
}

// ParamsFromHost replaces the parameters with src (len NumParams).
func (m *Model) ParamsFromHost(src []float32) error {
	if err := m.checkLen("params from host", len(src)); err != nil {
		return err
	}
	return m.dev.Upload(m.params, src)
}

// GradsToHost copies the gradients into dst (len NumParams).
func (m *Model) GradsToHost(dst []float32) error {
	if err := m.checkLen("grads to host", len(dst)); err != nil {
		return err
	}
	return m.dev.Download(dst, m.grads)
}

// GradsFromHost replaces the gradients with src (len NumParams), e.g. after an allreduce done
// on the host.
func (m *Model) GradsFromHost(src []float32) error {
	if err := m.checkLen("grads from host", len(src)); err != nil {
		return err
	}
	return m.dev.Upload(m.grads, src)
}

// load checks a batch and copies it to the device; it returns the batch size.
func (m *Model) load(op string, x []float32, labels []uint8) (int, error) {
	b := len(labels)
	if b == 0 || b > m.maxBatch {
		return 0, fmt.Errorf("nn: %s: %d labels, want 1..%d", op, b, m.maxBatch)
	}
	if len(x) != b*m.in.Len() {
		return 0, fmt.Errorf("nn: %s: %d input values for %d samples of %d", op, len(x), b, m.in.Len())
	}
	for i, l := range labels {
		if int(l) >= m.classes {
			return 0, fmt.Errorf("nn: %s: label %d of sample %d, model has %d classes", op, l, i, m.classes)
		}
		m.labHost[i] = int32(l)
	}
	if err := m.dev.Upload(m.input, x); err != nil {
		return 0, err
	}
	if err := m.dev.UploadIndex(m.labels, m.labHost[:b]); err != nil {
		return 0, err
	}
	return b, nil
}

func (m *Model) forward(batch int) kernels.Tensor {
	h := m.input
	for _, l := range m.layers {
		h = l.forward(h, batch)
	}
	return h
}

// ForwardBackward runs one batch (len(labels) samples, up to Batch, inputs sample-major) and
// overwrites the gradient vector with the gradient of the mean cross-entropy over the batch.
// It returns that loss and the number of correctly classified samples.
func (m *Model) ForwardBackward(x []float32, labels []uint8) (loss float64, correct int, err error) {
	b, err := m.load("forward-backward", x, labels)
	if err != nil {
		return 0, 0, err
	}
	logits := m.forward(b)
	loss, correct, err = m.dev.SoftmaxCrossEntropy(logits, m.labels, b, m.classes, m.dlogits)
	if err != nil {
		return 0, 0, fmt.Errorf("nn: %s forward: %w", m.name, err)
	}
	g := m.dlogits
	for i := len(m.layers) - 1; i >= 0; i-- {
		g = m.layers[i].backward(g, b, i > 0)
	}
	if err := m.dev.Sync(); err != nil {
		return 0, 0, fmt.Errorf("nn: %s backward: %w", m.name, err)
	}
	return loss, correct, nil
}

// Evaluate runs the model forward over any number of samples, in chunks of Batch, and returns
// the mean loss and the number of correct predictions. Gradients are untouched.
func (m *Model) Evaluate(x []float32, labels []uint8) (loss float64, correct int, err error) {
	n := len(labels)
	if len(x) != n*m.in.Len() {
		return 0, 0, fmt.Errorf("nn: evaluate: %d input values for %d samples of %d", len(x), n, m.in.Len())
	}
	if n == 0 {
		return 0, 0, errors.New("nn: evaluate: no samples")
	}
	var total float64
	for lo := 0; lo < n; lo += m.maxBatch {
		hi := min(n, lo+m.maxBatch)
		b, err := m.load("evaluate", x[lo*m.in.Len():hi*m.in.Len()], labels[lo:hi])
		if err != nil {
			return 0, 0, err
		}
		l, c, err := m.dev.SoftmaxCrossEntropy(m.forward(b), m.labels, b, m.classes, nil)
		if err != nil {
			return 0, 0, fmt.Errorf("nn: %s evaluate: %w", m.name, err)
		}
		total += l * float64(b)
		correct += c
	}
	return total / float64(n), correct, nil
}
