package kernels

import "fmt"

// Tensor is an opaque handle to a one-dimensional array that lives on a Device. Shapes are
// not part of the handle: every op takes the dimensions it needs, the way BLAS does. A handle
// is only valid with the Device that made it.
type Tensor interface {
	// Len is the number of elements.
	Len() int
	// Index reports whether the elements are int32 indices (from AllocIndex) rather than
	// float32 values (from Alloc).
	Index() bool
}

// ConvShape describes a two-dimensional convolution over NCHW tensors with square padding and
// stride: input batch×C×H×W, weights Out×C×KH×KW, bias Out, output batch×Out×OutH()×OutW().
type ConvShape struct {
	C, H, W int // input channels, height, width
	Out     int // output channels
	KH, KW  int // kernel height and width
	Pad     int // zero padding on every side
	Stride  int // stride in both directions (0 means 1)
}

func (s ConvShape) stride() int {
	if s.Stride <= 0 {
		return 1
	}
	return s.Stride
}

// OutH is the output height.
func (s ConvShape) OutH() int { return (s.H+2*s.Pad-s.KH)/s.stride() + 1 }

// OutW is the output width.
func (s ConvShape) OutW() int { return (s.W+2*s.Pad-s.KW)/s.stride() + 1 }

// WeightLen is the number of weights (without the bias).
func (s ConvShape) WeightLen() int { return s.Out * s.C * s.KH * s.KW }

// InLen is the number of input elements per sample.
func (s ConvShape) InLen() int { return s.C * s.H * s.W }

// OutLen is the number of output elements per sample.
func (s ConvShape) OutLen() int { return s.Out * s.OutH() * s.OutW() }

// Validate reports a shape that no convolution can have.
func (s ConvShape) Validate() error {
	switch {
	case s.C <= 0 || s.H <= 0 || s.W <= 0 || s.Out <= 0 || s.KH <= 0 || s.KW <= 0:
		return fmt.Errorf("kernels: conv shape %+v: every dimension must be positive", s)
	case s.Pad < 0 || s.Stride < 0:
		return fmt.Errorf("kernels: conv shape %+v: negative padding or stride", s)
	case s.OutH() <= 0 || s.OutW() <= 0:
		return fmt.Errorf("kernels: conv shape %+v: kernel larger than the padded input", s)
	}
	return nil
}

// Device runs numeric kernels on tensors it owns. All layouts are row-major; images are NCHW.
//
// Ops are asynchronous in spirit, like a CUDA stream: they do not return errors. An op that
// receives bad input (wrong lengths, a nil or foreign tensor) does nothing and records the
// error; Sync returns the first recorded error since the previous Sync and clears it. Only the
// ops that hand a value back to the host (Download, SoftmaxCrossEntropy) are synchronisation
// points. A Device is not safe for concurrent use: one goroutine drives it, as one stream.
type Device interface {
	// Name says which backend and GEMM engine run the ops, e.g. "cpu/avx2x1".
	Name() string
	// Threads is the number of host threads an op may use.
	Threads() int

	// Alloc returns a zeroed float32 tensor of n elements.
	Alloc(n int) (Tensor, error)
	// AllocIndex returns a zeroed int32 tensor of n elements (labels, argmax indices).
	AllocIndex(n int) (Tensor, error)
	// View returns elements [off, off+n) of t as a tensor sharing t's memory.
	View(t Tensor, off, n int) (Tensor, error)
	// Free releases t. Views of t must not be used afterwards.
	Free(t Tensor)

	// Upload copies len(src) values into dst[0:len(src)].
	Upload(dst Tensor, src []float32) error
	// Download copies src[0:len(dst)] into dst.
	Download(dst []float32, src Tensor) error
	// UploadIndex copies len(src) indices into the index tensor dst.
	UploadIndex(dst Tensor, src []int32) error

	// Sync waits for queued ops and returns (and clears) the first error any of them recorded.
	Sync() error

	// Gemm computes c = alpha·op(a)·op(b) + beta·c with op(a) m×k, op(b) k×n, c m×n, all
	// row-major and dense. transA means a is stored k×m; transB means b is stored n×k.
	// With beta == 0, c is overwritten (NaNs in c do not propagate).
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Tensor, beta float32, c Tensor)

	// Fill sets every element of x to v.
	Fill(x Tensor, v float32)
	// Copy copies src into dst (same length).
	Copy(dst, src Tensor)
	// Axpy computes y += alpha·x.
	Axpy(alpha float32, x, y Tensor)
	// Scale computes x *= alpha.
	Scale(alpha float32, x Tensor)
	// Add computes dst = a + b elementwise.
	Add(dst, a, b Tensor)
	// Mul computes dst = a ⊙ b elementwise.
	Mul(dst, a, b Tensor)

	// AddBias adds bias[c] to x[o][c][i] for x of shape outer×cols×inner (a dense layer's
	// batch×features is outer=batch, inner=1; a convolution's NCHW is outer=N, inner=H·W).
	AddBias(x Tensor, outer, cols, inner int, bias Tensor)
	// SumBias sets db[c] = Σ_{o,i} dy[o][c][i]: the gradient of AddBias.
	SumBias(db, dy Tensor, outer, cols, inner int)

	// ReLU computes y = max(x, 0); y may be x.
	ReLU(y, x Tensor)
	// ReLUBackward computes dx = dy where y > 0, else 0; dx may be dy.
	ReLUBackward(dx, dy, y Tensor)

	// SoftmaxCrossEntropy takes logits batch×classes and labels (an index tensor of batch
	// entries) and returns the mean cross-entropy loss over the batch and the number of rows
	// whose largest logit is the label's. When dlogits is not nil it receives the gradient of
	// the mean loss: (softmax − onehot)/batch. A label outside [0, classes) is an error.
	SoftmaxCrossEntropy(logits, labels Tensor, batch, classes int, dlogits Tensor) (loss float64, correct int, err error)

	// Conv2D computes y = conv(x, w) + bias for a batch of NCHW images (cross-correlation, as
	// in every framework).
	Conv2D(y, x, w, bias Tensor, batch int, s ConvShape)
	// Conv2DBackward computes dw and db (overwritten) and, when dx is not nil, dx (overwritten)
	// from dy, x and w.
	Conv2DBackward(dx, dw, db, dy, x, w Tensor, batch int, s ConvShape)

	// MaxPool2 is a 2×2, stride-2 max pool over batch×C×H×W (H and W even). argmax (an index
	// tensor with one entry per output) records which input each output came from.
	MaxPool2(y, argmax, x Tensor, batch, c, h, w int)
	// MaxPool2Backward scatters dy into dx (overwritten, batch×C×H×W) through argmax.
	MaxPool2Backward(dx, dy, argmax Tensor, batch, c, h, w int)

	// SGD applies one step of stochastic gradient descent with momentum and weight decay,
	// exactly PyTorch's torch.optim.SGD without dampening or Nesterov:
	//
	//	g = grad + weightDecay·param
	//	v = momentum·v + g          (v is not read or written when momentum == 0; it may be nil)
	//	param -= lr·v               (lr·g when momentum == 0)
	SGD(param, grad, velocity Tensor, lr, momentum, weightDecay float32)
}
