//go:build cuda || cudaemu

package cuda

// Parity tests: every op of the CUDA device against the CPU backend on the same inputs.
// They need a GPU (gorgonia.org/cu exits the test binary at init without one); on a machine
// without one, `make cuda-check` only compiles them (go test -c -tags cuda).
//
// Tolerances, as the largest |gpu − cpu| allowed relative to max(1, max|cpu|) over a result:
//   - exact (0): fill, copy, scale, add, mul, relu, relu backward, bias add, max pool (the
//     same IEEE operation on the same operands);
//   - 1e-6: axpy and SGD (the GPU may fuse a multiply-add, one rounding instead of two);
//   - 1e-5: bias sums, softmax cross-entropy (summation order, expf/logf vs float64);
//   - 1e-4: GEMM and convolution (cuBLAS and the CPU block the k-sum differently).

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/kernels"
)

// rig holds one CPU and one CUDA device for a test.
type rig struct {
	t   *testing.T
	cpu *kernels.CPU
	gpu *Device
	rng *rand.Rand
}

func newRig(t *testing.T) *rig {
	t.Helper()
	cpu, err := kernels.NewCPU(2)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := New(Config{Device: "cuda:0"})
	if err != nil {
		t.Fatalf("opening cuda:0: %v", err)
	}
	t.Cleanup(func() {
		if err := gpu.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &rig{t: t, cpu: cpu, gpu: gpu, rng: rand.New(rand.NewPCG(1, uint64(len(t.Name()))))}
}

func (r *rig) rand(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.rng.Float32()
	}
	return v
}

// both uploads vals to a new tensor on each device.
func (r *rig) both(vals []float32) (c, g kernels.Tensor) {
	r.t.Helper()
	return r.put(r.cpu, vals), r.put(r.gpu, vals)
}

func (r *rig) put(d kernels.Device, vals []float32) kernels.Tensor {
	r.t.Helper()
	t, err := d.Alloc(len(vals))
	if err != nil {
		r.t.Fatalf("%s: alloc %d: %v", d.Name(), len(vals), err)
	}
	if err := d.Upload(t, vals); err != nil {
		r.t.Fatalf("%s: upload: %v", d.Name(), err)
	}
	return t
}

func (r *rig) bothIndex(vals []int32) (c, g kernels.Tensor) {
	r.t.Helper()
	mk := func(d kernels.Device) kernels.Tensor {
		t, err := d.AllocIndex(len(vals))
		if err != nil {
			r.t.Fatalf("%s: index alloc: %v", d.Name(), err)
		}
		if err := d.UploadIndex(t, vals); err != nil {
			r.t.Fatalf("%s: index upload: %v", d.Name(), err)
		}
		return t
	}
	return mk(r.cpu), mk(r.gpu)
}

func (r *rig) host(d kernels.Device, t kernels.Tensor) []float32 {
	r.t.Helper()
	if err := d.Sync(); err != nil {
		r.t.Fatalf("%s: %v", d.Name(), err)
	}
	v := make([]float32, t.Len())
	if err := d.Download(v, t); err != nil {
		r.t.Fatalf("%s: download: %v", d.Name(), err)
	}
	return v
}

// agree compares the CPU and GPU tensors of a pair.
func (r *rig) agree(what string, c, g kernels.Tensor, tol float64) {
	r.t.Helper()
	near(r.t, what, r.host(r.gpu, g), r.host(r.cpu, c), tol)
}

// near fails when max|got − want| > tol·max(1, max|want|), or on NaN where want has none.
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale, worst, at := 1.0, 0.0, -1
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range want {
		diff := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(diff) && !math.IsNaN(float64(want[i])) {
			t.Fatalf("%s: [%d] = NaN, want %v", what, i, want[i])
		}
		if diff > worst {
			worst, at = diff, i
		}
	}
	if worst > tol*scale {
		t.Fatalf("%s: [%d] = %v, want %v (|diff| %.3g > %.3g)", what, at, got[at], want[at], worst, tol*scale)
	}
}

// sizes exercise empty, tiny, odd and beyond-one-grid lengths (the grid-stride loops).
var sizes = []int{0, 1, 7, 257, 100_003, 3_000_017}

func TestElementwiseParity(t *testing.T) {
	r := newRig(t)
	ops := []struct {
		name string
		tol  float64
		run  func(d kernels.Device, x, y, z kernels.Tensor) kernels.Tensor // returns the result
	}{
		{"fill", 0, func(d kernels.Device, x, _, _ kernels.Tensor) kernels.Tensor { d.Fill(x, -2.5); return x }},
		{"copy", 0, func(d kernels.Device, x, y, _ kernels.Tensor) kernels.Tensor { d.Copy(y, x); return y }},
		{"scale", 0, func(d kernels.Device, x, _, _ kernels.Tensor) kernels.Tensor { d.Scale(0.37, x); return x }},
		{"axpy", 1e-6, func(d kernels.Device, x, y, _ kernels.Tensor) kernels.Tensor { d.Axpy(-1.7, x, y); return y }},
		{"add", 0, func(d kernels.Device, x, y, z kernels.Tensor) kernels.Tensor { d.Add(z, x, y); return z }},
		{"add in place", 0, func(d kernels.Device, x, y, _ kernels.Tensor) kernels.Tensor { d.Add(x, x, y); return x }},
		{"mul", 0, func(d kernels.Device, x, y, z kernels.Tensor) kernels.Tensor { d.Mul(z, x, y); return z }},
		{"relu", 0, func(d kernels.Device, x, y, _ kernels.Tensor) kernels.Tensor { d.ReLU(y, x); return y }},
		{"relu in place", 0, func(d kernels.Device, x, _, _ kernels.Tensor) kernels.Tensor { d.ReLU(x, x); return x }},
		{"relu backward", 0, func(d kernels.Device, x, y, z kernels.Tensor) kernels.Tensor { d.ReLUBackward(z, y, x); return z }},
		{"relu backward in place", 0, func(d kernels.Device, x, y, _ kernels.Tensor) kernels.Tensor { d.ReLUBackward(y, y, x); return y }},
	}
	for _, op := range ops {
		for _, n := range sizes {
			xs, ys, zs := r.rand(n, -1, 1), r.rand(n, -1, 1), r.rand(n, -1, 1)
			cx, gx := r.both(xs)
			cy, gy := r.both(ys)
			cz, gz := r.both(zs)
			cr := op.run(r.cpu, cx, cy, cz)
			gr := op.run(r.gpu, gx, gy, gz)
			r.agree(op.name+" n="+itoa(n), cr, gr, op.tol)
			for _, p := range [][2]kernels.Tensor{{cx, gx}, {cy, gy}, {cz, gz}} {
				r.cpu.Free(p[0])
				r.gpu.Free(p[1])
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSGDParity(t *testing.T) {
	r := newRig(t)
	cases := []struct {
		name             string
		n                int
		lr, mom, wd      float32
		steps            int
		expectVelocities bool
	}{
		{"plain", 1001, 0.1, 0, 0, 1, false},
		{"weight decay", 1001, 0.05, 0, 5e-4, 2, false},
		{"momentum", 100_003, 0.01, 0.9, 0, 3, true},
		{"momentum and decay", 3_000_017, 0.01, 0.9, 1e-4, 3, true},
		{"empty", 0, 0.1, 0.9, 1e-4, 1, true},
	}
	for _, c := range cases {
		cp, gp := r.both(r.rand(c.n, -1, 1))
		cv, gv := r.both(make([]float32, c.n))
		for s := 0; s < c.steps; s++ {
			grad := r.rand(c.n, -0.5, 0.5)
			cg, gg := r.both(grad)
			r.cpu.SGD(cp, cg, cv, c.lr, c.mom, c.wd)
			r.gpu.SGD(gp, gg, gv, c.lr, c.mom, c.wd)
			r.agree(c.name+" params", cp, gp, 1e-6)
			if c.expectVelocities {
				r.agree(c.name+" velocity", cv, gv, 1e-6)
			}
		}
	}
}

func TestGemmParity(t *testing.T) {
	r := newRig(t)
	cases := []struct {
		m, n, k        int
		transA, transB bool
		alpha, beta    float32
	}{
		{1, 1, 1, false, false, 1, 0},
		{7, 5, 3, false, false, 1, 0},
		{7, 5, 3, true, false, 1, 0},
		{7, 5, 3, false, true, 1, 0},
		{7, 5, 3, true, true, 0.5, 0.25},
		{64, 256, 784, false, true, 1, 0},  // dense forward: x·Wᵀ
		{256, 784, 64, true, false, 1, 1},  // dense weight gradient, accumulated
		{64, 784, 256, false, false, 1, 0}, // dense input gradient
		{33, 17, 0, false, false, 1, 0.5},  // k = 0 scales c by beta
		{0, 5, 3, false, false, 1, 0},
		{129, 1, 257, false, false, -1, 1},
	}
	for _, c := range cases {
		name := "gemm " + itoa(c.m) + "x" + itoa(c.n) + "x" + itoa(c.k)
		ca, ga := r.both(r.rand(c.m*c.k, -1, 1))
		cb, gb := r.both(r.rand(c.k*c.n, -1, 1))
		cc, gc := r.both(r.rand(c.m*c.n, -1, 1))
		r.cpu.Gemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, ca, cb, c.beta, cc)
		r.gpu.Gemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, ga, gb, c.beta, gc)
		r.agree(name, cc, gc, 1e-4)
	}
	// beta == 0 overwrites c, NaNs included.
	nan := float32(math.NaN())
	ca, ga := r.both(r.rand(6, -1, 1))
	cb, gb := r.both(r.rand(6, -1, 1))
	cc, gc := r.both([]float32{nan, nan, nan, nan})
	r.cpu.Gemm(false, false, 2, 2, 3, 1, ca, cb, 0, cc)
	r.gpu.Gemm(false, false, 2, 2, 3, 1, ga, gb, 0, gc)
	r.agree("gemm beta=0 over NaN", cc, gc, 1e-6)
}

func TestBiasParity(t *testing.T) {
	r := newRig(t)
	shapes := [][3]int{{1, 1, 1}, {64, 10, 1}, {3, 7, 11}, {16, 32, 784}, {0, 5, 3}, {4097, 3, 1}}
	for _, s := range shapes {
		outer, cols, inner := s[0], s[1], s[2]
		name := "bias " + itoa(outer) + "x" + itoa(cols) + "x" + itoa(inner)
		cx, gx := r.both(r.rand(outer*cols*inner, -1, 1))
		cb, gb := r.both(r.rand(cols, -1, 1))
		r.cpu.AddBias(cx, outer, cols, inner, cb)
		r.gpu.AddBias(gx, outer, cols, inner, gb)
		r.agree(name+" add", cx, gx, 0)
		cdb, gdb := r.both(r.rand(cols, -1, 1)) // garbage in: SumBias overwrites
		r.cpu.SumBias(cdb, cx, outer, cols, inner)
		r.gpu.SumBias(gdb, gx, outer, cols, inner)
		r.agree(name+" sum", cdb, gdb, 1e-5)
	}
}

func TestSoftmaxCrossEntropyParity(t *testing.T) {
	r := newRig(t)
	cases := []struct {
		batch, classes int
		spread         float32
		grad           bool
	}{
		{1, 1, 1, true},
		{1, 10, 1, true},
		{64, 10, 5, true},
		{64, 10, 5, false},
		{7, 1000, 30, true}, // more classes than threads per block; large logits
		{300, 3, 80, true},  // exp overflows without the max shift
	}
	for _, c := range cases {
		name := "softmax " + itoa(c.batch) + "x" + itoa(c.classes)
		cz, gz := r.both(r.rand(c.batch*c.classes, -c.spread, c.spread))
		labels := make([]int32, c.batch)
		for i := range labels {
			labels[i] = int32(r.rng.IntN(c.classes))
		}
		cl, gl := r.bothIndex(labels)
		var cd, gd kernels.Tensor
		if c.grad {
			cd, gd = r.both(make([]float32, c.batch*c.classes))
		}
		closs, ccor, cerr := r.cpu.SoftmaxCrossEntropy(cz, cl, c.batch, c.classes, cd)
		gloss, gcor, gerr := r.gpu.SoftmaxCrossEntropy(gz, gl, c.batch, c.classes, gd)
		if cerr != nil || gerr != nil {
			t.Fatalf("%s: cpu error %v, gpu error %v", name, cerr, gerr)
		}
		if math.Abs(gloss-closs) > 1e-5*math.Max(1, math.Abs(closs)) {
			t.Fatalf("%s: loss %v, cpu %v", name, gloss, closs)
		}
		if gcor != ccor {
			t.Fatalf("%s: %d correct, cpu %d", name, gcor, ccor)
		}
		if c.grad {
			r.agree(name+" dlogits", cd, gd, 1e-5)
		}
	}
	// Ties: the first largest logit decides, on both devices.
	cz, gz := r.both([]float32{3, 3, 1, 0, 2, 2})
	cl, gl := r.bothIndex([]int32{1, 2})
	_, ccor, _ := r.cpu.SoftmaxCrossEntropy(cz, cl, 2, 3, nil)
	_, gcor, gerr := r.gpu.SoftmaxCrossEntropy(gz, gl, 2, 3, nil)
	if gerr != nil || gcor != ccor || gcor != 0 {
		t.Fatalf("ties: gpu %d correct (err %v), cpu %d, want 0", gcor, gerr, ccor)
	}
}

func TestConvParity(t *testing.T) {
	r := newRig(t)
	cases := []struct {
		batch int
		s     kernels.ConvShape
		ws    int64 // ConvWorkspaceBytes; small values force chunking
	}{
		{1, kernels.ConvShape{C: 1, H: 5, W: 5, Out: 1, KH: 3, KW: 3}, 0},
		{4, kernels.ConvShape{C: 1, H: 28, W: 28, Out: 32, KH: 5, KW: 5, Pad: 2}, 0},
		{3, kernels.ConvShape{C: 32, H: 14, W: 14, Out: 64, KH: 5, KW: 5, Pad: 2}, 0},
		{5, kernels.ConvShape{C: 3, H: 9, W: 7, Out: 4, KH: 3, KW: 2, Pad: 1, Stride: 2}, 0},
		{5, kernels.ConvShape{C: 3, H: 9, W: 7, Out: 4, KH: 3, KW: 2, Pad: 1, Stride: 2}, 4 * 3 * 3 * 2 * 5 * 4 * 2}, // 2 samples per chunk
		{7, kernels.ConvShape{C: 2, H: 6, W: 6, Out: 3, KH: 3, KW: 3, Pad: 0, Stride: 3}, 1},                         // 1 sample per chunk
	}
	for i, c := range cases {
		name := "conv case " + itoa(i)
		gpu := r.gpu
		if c.ws != 0 {
			var err error
			gpu, err = New(Config{Device: "cuda:0", ConvWorkspaceBytes: c.ws})
			if err != nil {
				t.Fatal(err)
			}
		}
		s := c.s
		xs := r.rand(c.batch*s.InLen(), -1, 1)
		ws := r.rand(s.WeightLen(), -0.5, 0.5)
		bs := r.rand(s.Out, -0.5, 0.5)
		dys := r.rand(c.batch*s.OutLen(), -1, 1)
		type set struct{ x, w, b, y, dy, dx, dw, db kernels.Tensor }
		mk := func(d kernels.Device) set {
			return set{
				x: r.put(d, xs), w: r.put(d, ws), b: r.put(d, bs), dy: r.put(d, dys),
				y:  r.put(d, r.rand(c.batch*s.OutLen(), -9, 9)), // garbage: overwritten
				dx: r.put(d, r.rand(c.batch*s.InLen(), -9, 9)),
				dw: r.put(d, r.rand(s.WeightLen(), -9, 9)),
				db: r.put(d, r.rand(s.Out, -9, 9)),
			}
		}
		cs, gs := mk(r.cpu), mk(gpu)
		r.cpu.Conv2D(cs.y, cs.x, cs.w, cs.b, c.batch, s)
		gpu.Conv2D(gs.y, gs.x, gs.w, gs.b, c.batch, s)
		near(t, name+" forward", r.host(gpu, gs.y), r.host(r.cpu, cs.y), 1e-4)
		r.cpu.Conv2DBackward(cs.dx, cs.dw, cs.db, cs.dy, cs.x, cs.w, c.batch, s)
		gpu.Conv2DBackward(gs.dx, gs.dw, gs.db, gs.dy, gs.x, gs.w, c.batch, s)
		near(t, name+" dx", r.host(gpu, gs.dx), r.host(r.cpu, cs.dx), 1e-4)
		near(t, name+" dw", r.host(gpu, gs.dw), r.host(r.cpu, cs.dw), 1e-4)
		near(t, name+" db", r.host(gpu, gs.db), r.host(r.cpu, cs.db), 1e-5)
		// Without dx, the weight gradients are the same.
		gpu.Conv2DBackward(nil, gs.dw, gs.db, gs.dy, gs.x, gs.w, c.batch, s)
		near(t, name+" dw without dx", r.host(gpu, gs.dw), r.host(r.cpu, cs.dw), 1e-4)
		if gpu != r.gpu {
			if err := gpu.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestMaxPoolParity(t *testing.T) {
	r := newRig(t)
	shapes := [][4]int{{1, 1, 2, 2}, {1, 1, 4, 4}, {3, 5, 8, 6}, {16, 32, 28, 28}, {0, 3, 4, 4}}
	for _, s := range shapes {
		batch, c, h, w := s[0], s[1], s[2], s[3]
		name := "maxpool " + itoa(batch) + "x" + itoa(c) + "x" + itoa(h) + "x" + itoa(w)
		in := r.rand(batch*c*h*w, -1, 1)
		for i := 0; i+1 < len(in); i += 5 {
			in[i+1] = in[i] // ties inside windows
		}
		outs := batch * c * (h / 2) * (w / 2)
		cx, gx := r.both(in)
		cy, gy := r.both(make([]float32, outs))
		ca, ga := r.bothIndex(make([]int32, outs))
		r.cpu.MaxPool2(cy, ca, cx, batch, c, h, w)
		r.gpu.MaxPool2(gy, ga, gx, batch, c, h, w)
		r.agree(name+" forward", cy, gy, 0)
		cdy, gdy := r.both(r.rand(outs, -1, 1))
		cdx, gdx := r.both(r.rand(batch*c*h*w, -9, 9))
		r.cpu.MaxPool2Backward(cdx, cdy, ca, batch, c, h, w)
		r.gpu.MaxPool2Backward(gdx, gdy, ga, batch, c, h, w)
		r.agree(name+" backward", cdx, gdx, 0)
	}
}

func TestSum(t *testing.T) {
	r := newRig(t)
	for _, n := range sizes {
		xs := r.rand(n, -1, 1)
		var want, mag float64
		for _, v := range xs {
			want += float64(v)
			mag += math.Abs(float64(v))
		}
		_, gx := r.both(xs)
		got, err := r.gpu.Sum(gx)
		if err != nil {
			t.Fatalf("sum n=%d: %v", n, err)
		}
		if math.Abs(float64(got)-want) > 1e-6*mag+1e-7 {
			t.Fatalf("sum n=%d: %v, want %v (Σ|x| = %v)", n, got, want, mag)
		}
	}
}

func TestViewsAndFree(t *testing.T) {
	r := newRig(t)
	cx, gx := r.both([]float32{1, 2, 3, 4, 5, 6})
	for _, p := range []struct {
		d kernels.Device
		x kernels.Tensor
	}{{r.cpu, cx}, {r.gpu, gx}} {
		v, err := p.d.View(p.x, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		vv, err := p.d.View(v, 1, 2) // a view of a view
		if err != nil {
			t.Fatal(err)
		}
		p.d.Scale(10, v)
		p.d.Scale(-1, vv)
	}
	r.agree("views", cx, gx, 0)
	if got := r.host(r.gpu, gx); got[2] != -30 || got[0] != 1 {
		t.Fatalf("views: %v", got)
	}
	if _, err := r.gpu.View(gx, 4, 3); err == nil {
		t.Fatal("a view past the end succeeded")
	}
	r.gpu.Free(gx)
	r.gpu.Scale(2, gx)
	if err := r.gpu.Sync(); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("op on a freed tensor: %v, want an error that says freed", err)
	}
}

// TestBadInputIsAnError checks that wrong arguments are recorded and returned by Sync, with
// the device still usable afterwards, exactly as on the CPU backend.
func TestBadInputIsAnError(t *testing.T) {
	r := newRig(t)
	d := r.gpu
	x := r.put(d, r.rand(10, -1, 1))
	y := r.put(d, r.rand(11, -1, 1))
	idx, err := d.AllocIndex(4)
	if err != nil {
		t.Fatal(err)
	}
	host, err := r.cpu.Alloc(10)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		op   func()
		want string
	}{
		{"length mismatch", func() { d.Add(x, x, y) }, "lengths differ"},
		{"foreign tensor", func() { d.Axpy(1, host, x) }, "another device"},
		{"index as float", func() { d.ReLU(idx, idx) }, "index tensor"},
		{"gemm too small", func() { d.Gemm(false, false, 4, 4, 4, 1, x, x, 0, x) }, "at least 16"},
		{"negative dims", func() { d.AddBias(x, -1, 2, 3, x) }, "negative"},
		{"odd pool", func() { d.MaxPool2(x, idx, x, 1, 1, 3, 3) }, "even"},
		{"bad conv", func() { d.Conv2D(x, x, x, x, 1, kernels.ConvShape{C: 1, H: 2, W: 2, Out: 1, KH: 3, KW: 3}) }, "kernel larger"},
		{"nil tensor", func() { d.Fill(nil, 1) }, "nil"},
	}
	for _, c := range cases {
		c.op()
		err := d.Sync()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Sync() = %v, want an error containing %q", c.name, err, c.want)
		}
		if err := d.Sync(); err != nil {
			t.Errorf("%s: second Sync() = %v, want nil (errors are cleared)", c.name, err)
		}
	}
	labels := r.putIndex(d, []int32{0, 3}) // 3 == classes: one past the end
	logits := r.put(d, r.rand(2*3, -1, 1))
	if _, _, err := d.SoftmaxCrossEntropy(logits, labels, 2, 3, nil); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("label out of range: %v, want an error naming row 1", err)
	}
	// Still usable.
	d.Fill(x, 2)
	if got := r.host(d, x); got[9] != 2 {
		t.Fatalf("after errors: %v", got)
	}
}

func (r *rig) putIndex(d kernels.Device, vals []int32) kernels.Tensor {
	r.t.Helper()
	t, err := d.AllocIndex(len(vals))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := d.UploadIndex(t, vals); err != nil {
		r.t.Fatal(err)
	}
	return t
}

// TestNoAllocationsPerOp checks that the steady-state ops of a training step allocate nothing
// on the Go heap (launch arguments live in the Device; errors are built only on bad input).
func TestNoAllocationsPerOp(t *testing.T) {
	r := newRig(t)
	d := r.gpu
	const n = 1000
	x, y, z := r.put(d, r.rand(n, -1, 1)), r.put(d, r.rand(n, -1, 1)), r.put(d, r.rand(n, -1, 1))
	a, b, c := r.put(d, r.rand(10*100, -1, 1)), r.put(d, r.rand(100*10, -1, 1)), r.put(d, r.rand(10*10, -1, 1))
	bias := r.put(d, r.rand(10, -1, 1))
	s := kernels.ConvShape{C: 2, H: 6, W: 6, Out: 3, KH: 3, KW: 3, Pad: 1}
	cx, cw, cb := r.put(d, r.rand(2*s.InLen(), -1, 1)), r.put(d, r.rand(s.WeightLen(), -1, 1)), r.put(d, r.rand(s.Out, -1, 1))
	cy, cdx, cdw := r.put(d, r.rand(2*s.OutLen(), -1, 1)), r.put(d, r.rand(2*s.InLen(), -1, 1)), r.put(d, r.rand(s.WeightLen(), -1, 1))
	idx, err := d.AllocIndex(2 * s.Out * 3 * 3)
	if err != nil {
		t.Fatal(err)
	}
	py := r.put(d, make([]float32, 2*s.Out*3*3))
	step := func() {
		d.Add(z, x, y)
		d.Mul(z, z, y)
		d.Axpy(0.5, x, y)
		d.Scale(0.9, y)
		d.ReLU(z, z)
		d.ReLUBackward(z, z, y)
		d.Gemm(false, true, 10, 10, 100, 1, a, b, 0, c)
		d.AddBias(c, 10, 10, 1, bias)
		d.SumBias(bias, c, 10, 10, 1)
		d.Conv2D(cy, cx, cw, cb, 2, s)
		d.Conv2DBackward(cdx, cdw, cb, cy, cx, cw, 2, s)
		d.MaxPool2(py, idx, cy, 2, s.Out, 6, 6)
		d.MaxPool2Backward(cy, py, idx, 2, s.Out, 6, 6)
		d.SGD(x, y, z, 0.1, 0.9, 1e-4)
		d.Copy(z, x)
		d.Fill(z, 1)
	}
	step() // grows the scratch buffers once
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(10, step); allocs != 0 {
		t.Fatalf("a training step's ops allocate %v times", allocs)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}
