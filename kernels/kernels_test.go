package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// devices returns one CPU device per available GEMM engine and thread count.
func devices(t testing.TB) []*CPU {
	var out []*CPU
	for _, e := range GEMMEngines() {
		for _, th := range []int{1, 3} {
			d, err := NewCPUWith(CPUConfig{Threads: th, GEMM: e})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func tensor(t testing.TB, d Device, v []float32) Tensor {
	x, err := d.Alloc(len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(x, v); err != nil {
		t.Fatal(err)
	}
	return x
}

func host(t testing.TB, d Device, x Tensor) []float32 {
	out := make([]float32, x.Len())
	if err := d.Download(out, x); err != nil {
		t.Fatal(err)
	}
	return out
}

func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: [%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestGemm(t *testing.T) {
	shapes := []struct{ m, n, k int }{
		{0, 3, 4}, {3, 0, 4}, {2, 3, 0}, {1, 1, 1}, {6, 16, 7}, {7, 13, 5},
		{17, 33, 300}, {100, 50, 257}, {64, 10, 128}, {5, 2100, 3},
	}
	coefs := []struct{ alpha, beta float32 }{{1, 0}, {0.5, 1}, {-2, 0.25}, {0, 3}}
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range devices(t) {
		for _, s := range shapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, co := range coefs {
						name := fmt.Sprintf("%s/%dx%dx%d/ta=%v/tb=%v/a=%v/b=%v", d.Name(), s.m, s.n, s.k, ta, tb, co.alpha, co.beta)
						a, b, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), randSlice(r, s.m*s.n)
						want := make([]float64, s.m*s.n)
						for i := 0; i < s.m; i++ {
							for j := 0; j < s.n; j++ {
								var sum float64
								for p := 0; p < s.k; p++ {
									av, bv := a[i*s.k+p], b[p*s.n+j]
									if ta {
										av = a[p*s.m+i]
									}
									if tb {
										bv = b[j*s.k+p]
									}
									sum += float64(av) * float64(bv)
								}
								want[i*s.n+j] = float64(co.alpha)*sum + float64(co.beta)*float64(c[i*s.n+j])
							}
						}
						at, bt, ct := tensor(t, d, a), tensor(t, d, b), tensor(t, d, c)
						d.Gemm(ta, tb, s.m, s.n, s.k, co.alpha, at, bt, co.beta, ct)
						if err := d.Sync(); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						near(t, name, host(t, d, ct), want, 1e-4*math.Sqrt(float64(s.k+1)))
					}
				}
			}
		}
	}
}

func TestGemmBetaZeroIgnoresNaN(t *testing.T) {
	for _, d := range devices(t) {
		a := tensor(t, d, []float32{1, 2})
		b := tensor(t, d, []float32{3, 4})
		c := tensor(t, d, []float32{float32(math.NaN())})
		d.Gemm(false, false, 1, 1, 2, 1, a, b, 0, c)
		if got := host(t, d, c)[0]; got != 11 {
			t.Errorf("%s: got %v, want 11", d.Name(), got)
		}
	}
}

func TestBadInputIsAnError(t *testing.T) {
	d, err := NewCPU(1)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCPU(1)
	small, _ := d.Alloc(3)
	big, _ := d.Alloc(100)
	foreign, _ := other.Alloc(100)
	idx, _ := d.AllocIndex(4)
	cases := []struct {
		name string
		op   func()
		want string
	}{
		{"gemm short a", func() { d.Gemm(false, false, 4, 4, 4, 1, small, big, 0, big) }, "gemm: a"},
		{"gemm negative", func() { d.Gemm(false, false, -1, 4, 4, 1, big, big, 0, big) }, "negative"},
		{"gemm foreign", func() { d.Gemm(false, false, 2, 2, 2, 1, foreign, big, 0, big) }, "gemm: a"},
		{"gemm index", func() { d.Gemm(false, false, 2, 2, 1, 1, idx, big, 0, big) }, "index tensor"},
		{"axpy lengths", func() { d.Axpy(1, small, big) }, "lengths differ"},
		{"relu nil", func() { d.ReLU(nil, big) }, "nil tensor"},
		{"pool odd", func() { d.MaxPool2(big, idx, big, 1, 1, 3, 3) }, "even"},
		{"conv shape", func() { d.Conv2D(big, big, big, big, 1, ConvShape{C: 1, H: 2, W: 2, Out: 1, KH: 5, KW: 5}) }, "kernel larger"},
		{"conv short y", func() { d.Conv2D(small, big, big, big, 1, ConvShape{C: 1, H: 4, W: 4, Out: 1, KH: 3, KW: 3, Pad: 1}) }, "conv2d: y"},
	}
	for _, c := range cases {
		c.op()
		err := d.Sync()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	labels, _ := d.AllocIndex(2)
	_ = d.UploadIndex(labels, []int32{0, 7})
	logits, _ := d.Alloc(6)
	if _, _, err := d.SoftmaxCrossEntropy(logits, labels, 2, 3, nil); err == nil || !strings.Contains(err.Error(), "label 7") {
		t.Errorf("bad label: error %v", err)
	}
	if err := d.Sync(); err != nil {
		t.Errorf("Sync after a reported error: %v", err)
	}
	if _, err := NewCPUWith(CPUConfig{Threads: 0}); err == nil {
		t.Error("threads 0 accepted")
	}
	if _, err := NewCPUWith(CPUConfig{Threads: 1, GEMM: "mkl"}); err == nil || !strings.Contains(err.Error(), "available") {
		t.Errorf("unknown engine: %v", err)
	}
	if _, err := d.View(small, 2, 2); err == nil {
		t.Error("view past the end accepted")
	}
}

func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range devices(t) {
		x, y := randSlice(r, 37), randSlice(r, 37)
		xt, yt, zt := tensor(t, d, x), tensor(t, d, y), tensor(t, d, make([]float32, 37))
		want := func(fn func(i int) float64) []float64 {
			w := make([]float64, 37)
			for i := range w {
				w[i] = fn(i)
			}
			return w
		}
		d.Add(zt, xt, yt)
		near(t, "add", host(t, d, zt), want(func(i int) float64 { return float64(x[i] + y[i]) }), 0)
		d.Mul(zt, xt, yt)
		near(t, "mul", host(t, d, zt), want(func(i int) float64 { return float64(x[i] * y[i]) }), 0)
		d.Copy(zt, yt)
		d.Axpy(-0.5, xt, zt)
		near(t, "axpy", host(t, d, zt), want(func(i int) float64 { return float64(y[i] + -0.5*x[i]) }), 1e-7)
		d.Scale(3, zt)
		near(t, "scale", host(t, d, zt), want(func(i int) float64 { return 3 * float64(y[i]+-0.5*x[i]) }), 1e-6)
		d.ReLU(zt, xt)
		near(t, "relu", host(t, d, zt), want(func(i int) float64 { return math.Max(float64(x[i]), 0) }), 0)
		d.ReLUBackward(zt, yt, zt)
		near(t, "relu backward", host(t, d, zt), want(func(i int) float64 {
			if x[i] > 0 {
				return float64(y[i])
			}
			return 0
		}), 0)
		d.Fill(zt, 2.5)
		near(t, "fill", host(t, d, zt), want(func(int) float64 { return 2.5 }), 0)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBias(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	d, _ := NewCPU(1)
	for _, s := range []struct{ outer, cols, inner int }{{1, 1, 1}, {4, 3, 1}, {2, 5, 7}, {3, 1, 9}} {
		n := s.outer * s.cols * s.inner
		x, b := randSlice(r, n), randSlice(r, s.cols)
		xt, bt := tensor(t, d, x), tensor(t, d, b)
		d.AddBias(xt, s.outer, s.cols, s.inner, bt)
		want := make([]float64, n)
		sums := make([]float64, s.cols)
		for i := range want {
			c := (i / s.inner) % s.cols
			want[i] = float64(x[i] + b[c])
			sums[c] += float64(x[i])
		}
		near(t, "add bias", host(t, d, xt), want, 0)
		dy := tensor(t, d, x)
		d.SumBias(bt, dy, s.outer, s.cols, s.inner)
		near(t, "sum bias", host(t, d, bt), sums, 1e-5)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSoftmaxCrossEntropy(t *testing.T) {
	d, _ := NewCPU(1)
	r := rand.New(rand.NewPCG(7, 8))
	const batch, classes = 5, 4
	z := randSlice(r, batch*classes)
	z[0], z[1] = 3, 3 // a tie: the first wins
	lab := []int32{0, 1, 2, 3, 1}
	zt, lt, gt := tensor(t, d, z), func() Tensor { x, _ := d.AllocIndex(batch); _ = d.UploadIndex(x, lab); return x }(), tensor(t, d, make([]float32, batch*classes))
	loss, correct, err := d.SoftmaxCrossEntropy(zt, lt, batch, classes, gt)
	if err != nil {
		t.Fatal(err)
	}
	var want float64
	wantCorrect := 0
	wantGrad := make([]float64, batch*classes)
	for i := 0; i < batch; i++ {
		row := z[i*classes : (i+1)*classes]
		var s float64
		best := 0
		for j, v := range row {
			s += math.Exp(float64(v))
			if v > row[best] {
				best = j
			}
		}
		if best == int(lab[i]) {
			wantCorrect++
		}
		want += (math.Log(s) - float64(row[lab[i]])) / batch
		for j, v := range row {
			g := math.Exp(float64(v)) / s
			if j == int(lab[i]) {
				g--
			}
			wantGrad[i*classes+j] = g / batch
		}
	}
	if math.Abs(loss-want) > 1e-6 || correct != wantCorrect {
		t.Errorf("loss, correct = %v, %d; want %v, %d", loss, correct, want, wantCorrect)
	}
	near(t, "dlogits", host(t, d, gt), wantGrad, 1e-6)
}

func TestSGD(t *testing.T) {
	d, _ := NewCPU(1)
	for _, c := range []struct{ lr, mom, wd float32 }{{0.1, 0, 0}, {0.1, 0.9, 0}, {0.05, 0.9, 1e-3}, {0.01, 0, 0.1}} {
		p, g := []float32{1, -2, 3}, []float32{0.5, 0.25, -1}
		v := []float32{0.1, 0, -0.2}
		pt, gt, vt := tensor(t, d, p), tensor(t, d, g), tensor(t, d, v)
		d.SGD(pt, gt, vt, c.lr, c.mom, c.wd)
		want, wantV := make([]float64, 3), make([]float64, 3)
		for i := range p {
			gi := float64(g[i]) + float64(c.wd)*float64(p[i])
			vi := gi
			wantV[i] = float64(v[i])
			if c.mom != 0 {
				vi = float64(c.mom)*float64(v[i]) + gi
				wantV[i] = vi
			}
			want[i] = float64(p[i]) - float64(c.lr)*vi
		}
		near(t, "sgd param", host(t, d, pt), want, 1e-6)
		near(t, "sgd velocity", host(t, d, vt), wantV, 1e-6)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// convRef is the definition of the convolution, in float64.
func convRef(x, w, b []float32, batch int, s ConvShape) []float64 {
	oh, ow, st := s.OutH(), s.OutW(), s.stride()
	y := make([]float64, batch*s.OutLen())
	for n := 0; n < batch; n++ {
		for o := 0; o < s.Out; o++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					v := float64(b[o])
					for c := 0; c < s.C; c++ {
						for kh := 0; kh < s.KH; kh++ {
							for kw := 0; kw < s.KW; kw++ {
								ih, iw := i*st-s.Pad+kh, j*st-s.Pad+kw
								if ih < 0 || iw < 0 || ih >= s.H || iw >= s.W {
									continue
								}
								v += float64(x[((n*s.C+c)*s.H+ih)*s.W+iw]) * float64(w[((o*s.C+c)*s.KH+kh)*s.KW+kw])
							}
						}
					}
					y[((n*s.Out+o)*oh+i)*ow+j] = v
				}
			}
		}
	}
	return y
}

func TestConv2D(t *testing.T) {
	shapes := []ConvShape{
		{C: 1, H: 6, W: 5, Out: 2, KH: 5, KW: 5, Pad: 2},
		{C: 3, H: 7, W: 7, Out: 4, KH: 3, KW: 3, Pad: 1, Stride: 2},
		{C: 2, H: 4, W: 6, Out: 3, KH: 2, KW: 3},
		{C: 2, H: 3, W: 3, Out: 1, KH: 1, KW: 1, Pad: 1},
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, d := range devices(t) {
		for _, s := range shapes {
			for _, batch := range []int{1, 3} {
				name := fmt.Sprintf("%s/%+v/batch=%d", d.Name(), s, batch)
				x, w, b := randSlice(r, batch*s.InLen()), randSlice(r, s.WeightLen()), randSlice(r, s.Out)
				dy := randSlice(r, batch*s.OutLen())
				xt, wt, bt := tensor(t, d, x), tensor(t, d, w), tensor(t, d, b)
				yt := tensor(t, d, make([]float32, batch*s.OutLen()))
				d.Conv2D(yt, xt, wt, bt, batch, s)
				near(t, name+" forward", host(t, d, yt), convRef(x, w, b, batch, s), 1e-4)

				// The backward pass is the adjoint of the forward one: check each gradient
				// against the derivative of L = Σ dy·y, which is linear in x, w and b.
				dyt := tensor(t, d, dy)
				dxt, dwt, dbt := tensor(t, d, make([]float32, len(x))), tensor(t, d, randSlice(r, len(w))), tensor(t, d, randSlice(r, s.Out))
				d.Conv2DBackward(dxt, dwt, dbt, dyt, xt, wt, batch, s)
				if err := d.Sync(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				loss := func(x, w, b []float32) float64 {
					var l float64
					for i, v := range convRef(x, w, b, batch, s) {
						l += v * float64(dy[i])
					}
					return l
				}
				grad := func(v []float32, eval func() float64) []float64 {
					g := make([]float64, len(v))
					for i := range v {
						old := v[i]
						v[i] = old + 1
						up := eval()
						v[i] = old
						g[i] = up - eval()
					}
					return g
				}
				near(t, name+" dx", host(t, d, dxt), grad(x, func() float64 { return loss(x, w, b) }), 1e-3)
				near(t, name+" dw", host(t, d, dwt), grad(w, func() float64 { return loss(x, w, b) }), 1e-3)
				near(t, name+" db", host(t, d, dbt), grad(b, func() float64 { return loss(x, w, b) }), 1e-3)
			}
		}
	}
}

func TestMaxPool2(t *testing.T) {
	d, _ := NewCPU(1)
	x := []float32{
		1, 5, 2, 2,
		3, 4, 2, 9,
		-1, -2, 0, 0,
		-3, -4, 7, 0,
	}
	xt := tensor(t, d, x)
	yt := tensor(t, d, make([]float32, 4))
	at, _ := d.AllocIndex(4)
	d.MaxPool2(yt, at, xt, 1, 1, 4, 4)
	near(t, "pool forward", host(t, d, yt), []float64{5, 9, -1, 7}, 0)
	dxt := tensor(t, d, make([]float32, 16))
	d.MaxPool2Backward(dxt, tensor(t, d, []float32{10, 20, 30, 40}), at, 1, 1, 4, 4)
	near(t, "pool backward", host(t, d, dxt), []float64{
		0, 10, 0, 0,
		0, 0, 0, 20,
		30, 0, 0, 0,
		0, 0, 40, 0,
	}, 0)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestMaxPool2Ties: the first maximum in row-major window order wins, as in PyTorch.
func TestMaxPool2Ties(t *testing.T) {
	d, _ := NewCPU(1)
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		window [4]float32 // row-major 2×2
		want   int32
	}{
		{[4]float32{0, 0, 0, 0}, 0},
		{[4]float32{1, 3, 3, 2}, 1},
		{[4]float32{1, 2, 3, 3}, 2},
		{[4]float32{-1, -1, -1, 0}, 3},
		{[4]float32{negZero, 0, 0, 0}, 0},
	} {
		w := c.window
		xt := tensor(t, d, []float32{w[0], w[1], w[2], w[3]})
		yt := tensor(t, d, make([]float32, 1))
		at, _ := d.AllocIndex(1)
		d.MaxPool2(yt, at, xt, 1, 1, 2, 2)
		am := make([]int32, 1)
		copy(am, at.(*cpuTensor).i)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		if y := host(t, d, yt)[0]; am[0] != c.want || math.Float32bits(y) != math.Float32bits(w[c.want]) {
			t.Errorf("window %v: max %v at %d, want %v at %d", w, y, am[0], w[c.want], c.want)
		}
	}
}

func TestViewSharesMemory(t *testing.T) {
	d, _ := NewCPU(1)
	x := tensor(t, d, []float32{1, 2, 3, 4, 5})
	v, err := d.View(x, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	d.Scale(10, v)
	near(t, "view", host(t, d, x), []float64{1, 20, 30, 40, 5}, 0)
	if h, ok := HostView(v); !ok || len(h) != 3 || h[0] != 20 {
		t.Errorf("HostView = %v, %v", h, ok)
	}
}

func TestReLUEdges(t *testing.T) {
	d, _ := NewCPU(1)
	negZero := float32(math.Copysign(0, -1))
	x := tensor(t, d, []float32{-1, negZero, 0, 2, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45})
	y := tensor(t, d, make([]float32, 7))
	d.ReLU(y, x)
	near(t, "relu", host(t, d, y), []float64{0, 0, 0, 2, math.Inf(1), 0, float64(float32(1e-45))}, 0)
	dx := tensor(t, d, make([]float32, 7))
	d.ReLUBackward(dx, tensor(t, d, []float32{1, 2, 3, 4, 5, 6, 7}), x)
	near(t, "relu backward", host(t, d, dx), []float64{0, 0, 0, 4, 5, 0, 7}, 0)
}

// convBackwardRef computes the gradients of Σ dy·conv(x, w, b) directly, in float64.
func convBackwardRef(x, w, dy []float32, batch int, s ConvShape) (dx, dw, db []float64) {
	oh, ow, st := s.OutH(), s.OutW(), s.stride()
	dx, dw, db = make([]float64, len(x)), make([]float64, len(w)), make([]float64, s.Out)
	for n := 0; n < batch; n++ {
		for o := 0; o < s.Out; o++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					g := float64(dy[((n*s.Out+o)*oh+i)*ow+j])
					db[o] += g
					for c := 0; c < s.C; c++ {
						for kh := 0; kh < s.KH; kh++ {
							for kw := 0; kw < s.KW; kw++ {
								ih, iw := i*st-s.Pad+kh, j*st-s.Pad+kw
								if ih < 0 || iw < 0 || ih >= s.H || iw >= s.W {
									continue
								}
								xi := ((n*s.C+c)*s.H+ih)*s.W + iw
								wi := ((o*s.C+c)*s.KH+kh)*s.KW + kw
								dx[xi] += g * float64(w[wi])
								dw[wi] += g * float64(x[xi])
							}
						}
					}
				}
			}
		}
	}
	return dx, dw, db
}

// TestConv2DLarge uses shapes whose im2col matrix spans several GEMM panels and K slices
// (C·K·K = 300 > 256), as the CNN's second convolution does.
func TestConv2DLarge(t *testing.T) {
	shapes := []ConvShape{
		{C: 12, H: 14, W: 14, Out: 20, KH: 5, KW: 5, Pad: 2},
		{C: 1, H: 28, W: 28, Out: 9, KH: 5, KW: 5, Pad: 2},
		{C: 11, H: 9, W: 13, Out: 3, KH: 5, KW: 5, Pad: 1, Stride: 2},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, d := range devices(t) {
		for _, s := range shapes {
			const batch = 3
			name := fmt.Sprintf("%s/%+v", d.Name(), s)
			x, w, b := randSlice(r, batch*s.InLen()), randSlice(r, s.WeightLen()), randSlice(r, s.Out)
			dy := randSlice(r, batch*s.OutLen())
			xt, wt, bt, dyt := tensor(t, d, x), tensor(t, d, w), tensor(t, d, b), tensor(t, d, dy)
			yt := tensor(t, d, make([]float32, batch*s.OutLen()))
			d.Conv2D(yt, xt, wt, bt, batch, s)
			near(t, name+" forward", host(t, d, yt), convRef(x, w, b, batch, s), 1e-4)
			dxt, dwt, dbt := tensor(t, d, randSlice(r, len(x))), tensor(t, d, randSlice(r, len(w))), tensor(t, d, randSlice(r, s.Out))
			d.Conv2DBackward(dxt, dwt, dbt, dyt, xt, wt, batch, s)
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			dx, dw, db := convBackwardRef(x, w, dy, batch, s)
			near(t, name+" dx", host(t, d, dxt), dx, 1e-4)
			near(t, name+" dw", host(t, d, dwt), dw, 1e-4)
			near(t, name+" db", host(t, d, dbt), db, 1e-4)
		}
	}
}
