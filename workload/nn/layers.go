package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/hetsync/hetsync/kernels"
)

// Shape is the per-sample shape of an activation: C channels of H×W (a feature vector is C×1×1).
type Shape struct{ C, H, W int }

// Len is the number of values per sample.
func (s Shape) Len() int { return s.C * s.H * s.W }

func (s Shape) String() string { return fmt.Sprintf("%d×%d×%d", s.C, s.H, s.W) }

// Layer describes one layer of a Sequential model. Layers are descriptions: NewSequential
// turns them into bound layers with parameters in the model's flat vector and activation
// buffers on the model's device.
type Layer interface {
	fmt.Stringer
	// bind checks the layer against its input shape and returns its output shape and the
	// number of parameters it needs.
	plan(in Shape) (out Shape, params int, err error)
	// build allocates the layer's buffers for batches of up to maxBatch samples; params and
	// grads are views of the layer's slice of the flat vectors (nil when it has none).
	build(dev kernels.Device, in Shape, maxBatch int, params, grads kernels.Tensor, index int) (boundLayer, error)
}

// boundLayer runs one layer. forward returns the output tensor (owned by the layer); backward
// takes the gradient of the output and returns that of the input (nil when needDx is false).
type boundLayer interface {
	forward(x kernels.Tensor, batch int) kernels.Tensor
	backward(dy kernels.Tensor, batch int, needDx bool) kernels.Tensor
	// initParams writes the initial parameters (host layout: weights then biases) using rng.
	initParams(dst []float32, rng *rand.Rand)
}

// glorot fills w with Xavier/Glorot-uniform values: U(−a, a), a = √(6/(fanIn+fanOut)).
func glorot(w []float32, fanIn, fanOut int, rng *rand.Rand) {
	a := math.Sqrt(6 / float64(fanIn+fanOut))
	for i := range w {
		w[i] = float32((2*rng.Float64() - 1) * a)
	}
}

func allocAll(dev kernels.Device, ns ...int) ([]kernels.Tensor, error) {
	out := make([]kernels.Tensor, len(ns))
	for i, n := range ns {
		t, err := dev.Alloc(n)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func views(dev kernels.Device, t kernels.Tensor, lens ...int) ([]kernels.Tensor, error) {
	out := make([]kernels.Tensor, len(lens))
	off := 0
	for i, n := range lens {
		v, err := dev.View(t, off, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
		off += n
	}
	return out, nil
}

// ---- Dense ----

type denseSpec struct{ out int }

// Dense is a fully connected layer y = x·Wᵀ + b with W stored out×in (PyTorch's layout) and b
// of length out. Its input is flattened.
func Dense(out int) Layer { return denseSpec{out} }

func (s denseSpec) String() string { return fmt.Sprintf("Dense(%d)", s.out) }

func (s denseSpec) plan(in Shape) (Shape, int, error) {
	if s.out <= 0 {
		return Shape{}, 0, fmt.Errorf("%v: output size must be positive", s)
	}
	return Shape{C: s.out, H: 1, W: 1}, s.out*in.Len() + s.out, nil
}

type dense struct {
	dev      kernels.Device
	in, out  int
	w, b     kernels.Tensor
	dw, db   kernels.Tensor
	x, y, dx kernels.Tensor
}

func (s denseSpec) build(dev kernels.Device, in Shape, maxBatch int, params, grads kernels.Tensor, _ int) (boundLayer, error) {
	l := &dense{dev: dev, in: in.Len(), out: s.out}
	pv, err := views(dev, params, l.out*l.in, l.out)
	if err != nil {
		return nil, err
	}
	gv, err := views(dev, grads, l.out*l.in, l.out)
	if err != nil {
		return nil, err
	}
	l.w, l.b, l.dw, l.db = pv[0], pv[1], gv[0], gv[1]
	bufs, err := allocAll(dev, maxBatch*l.out, maxBatch*l.in)
	if err != nil {
		return nil, err
	}
	l.y, l.dx = bufs[0], bufs[1]
	return l, nil
}

func (l *dense) initParams(dst []float32, rng *rand.Rand) {
	glorot(dst[:l.out*l.in], l.in, l.out, rng)
	clear(dst[l.out*l.in:])
}

func (l *dense) forward(x kernels.Tensor, batch int) kernels.Tensor {
	l.x = x
	l.dev.Gemm(false, true, batch, l.out, l.in, 1, x, l.w, 0, l.y)
	l.dev.AddBias(l.y, batch, l.out, 1, l.b)
	return l.y
}

func (l *dense) backward(dy kernels.Tensor, batch int, needDx bool) kernels.Tensor {
	l.dev.Gemm(true, false, l.out, l.in, batch, 1, dy, l.x, 0, l.dw)
	l.dev.SumBias(l.db, dy, batch, l.out, 1)
	if !needDx {
		return nil
	}
	l.dev.Gemm(false, false, batch, l.in, l.out, 1, dy, l.w, 0, l.dx)
	return l.dx
}

// ---- Conv2D ----

type convSpec struct{ out, kernel, pad int }

// Conv2D is a convolution with out filters of kernel×kernel, stride 1 and pad zeros on every
// side (pad = kernel/2 keeps the size: 'same'), weights Out×C×K×K and one bias per filter.
func Conv2D(out, kernel, pad int) Layer { return convSpec{out, kernel, pad} }

func (s convSpec) String() string {
	return fmt.Sprintf("Conv2D(%d, %d×%d, pad %d)", s.out, s.kernel, s.kernel, s.pad)
}

func (s convSpec) shape(in Shape) kernels.ConvShape {
	return kernels.ConvShape{C: in.C, H: in.H, W: in.W, Out: s.out, KH: s.kernel, KW: s.kernel, Pad: s.pad, Stride: 1}
}

func (s convSpec) plan(in Shape) (Shape, int, error) {
	cs := s.shape(in)
	if err := cs.Validate(); err != nil {
		return Shape{}, 0, fmt.Errorf("%v on input %v: %w", s, in, err)
	}
	return Shape{C: s.out, H: cs.OutH(), W: cs.OutW()}, cs.WeightLen() + s.out, nil
}

type conv struct {
	dev      kernels.Device
	s        kernels.ConvShape
	w, b     kernels.Tensor
	dw, db   kernels.Tensor
	x, y, dx kernels.Tensor
}

func (s convSpec) build(dev kernels.Device, in Shape, maxBatch int, params, grads kernels.Tensor, _ int) (boundLayer, error) {
	l := &conv{dev: dev, s: s.shape(in)}
	pv, err := views(dev, params, l.s.WeightLen(), s.out)
	if err != nil {
		return nil, err
	}
	gv, err := views(dev, grads, l.s.WeightLen(), s.out)
	if err != nil {
		return nil, err
	}
	l.w, l.b, l.dw, l.db = pv[0], pv[1], gv[0], gv[1]
	bufs, err := allocAll(dev, maxBatch*l.s.OutLen(), maxBatch*l.s.InLen())
	if err != nil {
		return nil, err
	}
	l.y, l.dx = bufs[0], bufs[1]
	return l, nil
}

func (l *conv) initParams(dst []float32, rng *rand.Rand) {
	k := l.s.KH * l.s.KW
	glorot(dst[:l.s.WeightLen()], l.s.C*k, l.s.Out*k, rng)
	clear(dst[l.s.WeightLen():])
}

func (l *conv) forward(x kernels.Tensor, batch int) kernels.Tensor {
	l.x = x
	l.dev.Conv2D(l.y, x, l.w, l.b, batch, l.s)
	return l.y
}

func (l *conv) backward(dy kernels.Tensor, batch int, needDx bool) kernels.Tensor {
	var dx kernels.Tensor
	if needDx {
		dx = l.dx
	}
	l.dev.Conv2DBackward(dx, l.dw, l.db, dy, l.x, l.w, batch, l.s)
	return dx
}

// ---- ReLU ----

type reluSpec struct{}

// ReLU is max(x, 0) elementwise.
func ReLU() Layer { return reluSpec{} }

func (reluSpec) String() string { return "ReLU" }

func (reluSpec) plan(in Shape) (Shape, int, error) { return in, 0, nil }

type relu struct {
	dev kernels.Device
	n   int
	y   kernels.Tensor
	// yb is y cut to the current batch; full batches use y itself, so steady-state steps
	// allocate nothing.
	yb  kernels.Tensor
	ybN int
}

func (reluSpec) build(dev kernels.Device, in Shape, maxBatch int, _, _ kernels.Tensor, _ int) (boundLayer, error) {
	y, err := dev.Alloc(maxBatch * in.Len())
	if err != nil {
		return nil, err
	}
	return &relu{dev: dev, n: in.Len(), y: y}, nil
}

func (l *relu) initParams([]float32, *rand.Rand) {}

// batchView returns the first n elements of t, reusing the view made last time for the same
// tensor and length.
func batchView(dev kernels.Device, t kernels.Tensor, n int) kernels.Tensor {
	if t.Len() == n {
		return t
	}
	v, err := dev.View(t, 0, n)
	if err != nil {
		return t // the op that uses it records the length mismatch
	}
	return v
}

func (l *relu) forward(x kernels.Tensor, batch int) kernels.Tensor {
	n := batch * l.n
	if l.ybN != n {
		l.yb, l.ybN = batchView(l.dev, l.y, n), n
	}
	l.dev.ReLU(l.yb, batchView(l.dev, x, n))
	return l.y
}

func (l *relu) backward(dy kernels.Tensor, batch int, _ bool) kernels.Tensor {
	dyb := batchView(l.dev, dy, batch*l.n)
	l.dev.ReLUBackward(dyb, dyb, l.yb)
	return dy
}

// ---- MaxPool2D ----

type poolSpec struct{}

// MaxPool2D is a 2×2 max pool with stride 2; the input's height and width must be even.
func MaxPool2D() Layer { return poolSpec{} }

func (poolSpec) String() string { return "MaxPool2D(2)" }

func (s poolSpec) plan(in Shape) (Shape, int, error) {
	if in.H%2 != 0 || in.W%2 != 0 {
		return Shape{}, 0, fmt.Errorf("%v on input %v: height and width must be even", s, in)
	}
	return Shape{C: in.C, H: in.H / 2, W: in.W / 2}, 0, nil
}

type pool struct {
	dev    kernels.Device
	in     Shape
	y, dx  kernels.Tensor
	argmax kernels.Tensor
}

func (poolSpec) build(dev kernels.Device, in Shape, maxBatch int, _, _ kernels.Tensor, _ int) (boundLayer, error) {
	bufs, err := allocAll(dev, maxBatch*in.Len()/4, maxBatch*in.Len())
	if err != nil {
		return nil, err
	}
	am, err := dev.AllocIndex(maxBatch * in.Len() / 4)
	if err != nil {
		return nil, err
	}
	return &pool{dev: dev, in: in, y: bufs[0], dx: bufs[1], argmax: am}, nil
}

func (l *pool) initParams([]float32, *rand.Rand) {}

func (l *pool) forward(x kernels.Tensor, batch int) kernels.Tensor {
	l.dev.MaxPool2(l.y, l.argmax, x, batch, l.in.C, l.in.H, l.in.W)
	return l.y
}

func (l *pool) backward(dy kernels.Tensor, batch int, needDx bool) kernels.Tensor {
	if !needDx {
		return nil
	}
	l.dev.MaxPool2Backward(l.dx, dy, l.argmax, batch, l.in.C, l.in.H, l.in.W)
	return l.dx
}

// ---- Flatten ----

type flattenSpec struct{}

// Flatten turns C×H×W into a feature vector of C·H·W in NCHW order (as torch.nn.Flatten). It
// moves no data.
func Flatten() Layer { return flattenSpec{} }

func (flattenSpec) String() string { return "Flatten" }

func (flattenSpec) plan(in Shape) (Shape, int, error) { return Shape{C: in.Len(), H: 1, W: 1}, 0, nil }

type flatten struct{}

func (flattenSpec) build(kernels.Device, Shape, int, kernels.Tensor, kernels.Tensor, int) (boundLayer, error) {
	return flatten{}, nil
}

func (flatten) initParams([]float32, *rand.Rand)                         {}
func (flatten) forward(x kernels.Tensor, _ int) kernels.Tensor           { return x }
func (flatten) backward(dy kernels.Tensor, _ int, _ bool) kernels.Tensor { return dy }
