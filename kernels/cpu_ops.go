package kernels

import (
	"fmt"
	"math"
)

// The CPU backend's ops other than GEMM and convolution: elementwise arithmetic, bias, ReLU,
// softmax cross-entropy and the SGD update.

// Fill implements Device.
func (d *CPU) Fill(x Tensor, v float32) {
	if _, ok := d.same("fill", x); !ok {
		return
	}
	xs := f(x)
	for i := range xs {
		xs[i] = v
	}
}

// Copy implements Device.
func (d *CPU) Copy(dst, src Tensor) {
	if _, ok := d.same("copy", dst, src); ok {
		copy(f(dst), f(src))
	}
}

// Axpy implements Device.
func (d *CPU) Axpy(alpha float32, x, y Tensor) {
	if _, ok := d.same("axpy", x, y); ok {
		axpy(alpha, f(x), f(y))
	}
}

func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}

// Scale implements Device.
func (d *CPU) Scale(alpha float32, x Tensor) {
	if _, ok := d.same("scale", x); ok {
		xs := f(x)
		for i := range xs {
			xs[i] *= alpha
		}
	}
}

// Add implements Device.
func (d *CPU) Add(dst, a, b Tensor) {
	if _, ok := d.same("add", dst, a, b); ok {
		ds, as, bs := f(dst), f(a), f(b)
		as, bs = as[:len(ds)], bs[:len(ds)]
		for i := range ds {
			ds[i] = as[i] + bs[i]
		}
	}
}

// Mul implements Device.
func (d *CPU) Mul(dst, a, b Tensor) {
	if _, ok := d.same("mul", dst, a, b); ok {
		ds, as, bs := f(dst), f(a), f(b)
		as, bs = as[:len(ds)], bs[:len(ds)]
		for i := range ds {
			ds[i] = as[i] * bs[i]
		}
	}
}

func (d *CPU) dims(op string, ds ...int) bool {
	for _, v := range ds {
		if v < 0 {
			d.record(fmt.Errorf("kernels: cpu: %s: negative dimension in %v", op, append([]int(nil), ds...))) // a copy, so ds does not escape
			return false
		}
	}
	return true
}

// AddBias implements Device.
func (d *CPU) AddBias(x Tensor, outer, cols, inner int, bias Tensor) {
	if !d.dims("add bias", outer, cols, inner) {
		return
	}
	xs := d.fl("add bias", "x", x, outer*cols*inner)
	bs := d.fl("add bias", "bias", bias, cols)
	if xs == nil || bs == nil {
		return
	}
	p := 0
	for o := 0; o < outer; o++ {
		for c := 0; c < cols; c++ {
			v := bs[c]
			row := xs[p : p+inner]
			for i := range row {
				row[i] += v
			}
			p += inner
		}
	}
}

// SumBias implements Device.
func (d *CPU) SumBias(db, dy Tensor, outer, cols, inner int) {
	if !d.dims("sum bias", outer, cols, inner) {
		return
	}
	ys := d.fl("sum bias", "dy", dy, outer*cols*inner)
	bs := d.fl("sum bias", "db", db, cols)
	if ys == nil || bs == nil {
		return
	}
	sumBias(bs, ys, outer, cols, inner)
}

func sumBias(bs, ys []float32, outer, cols, inner int) {
	for c := range bs {
		bs[c] = 0
	}
	p := 0
	for o := 0; o < outer; o++ {
		if inner == 1 {
			row := ys[p : p+cols]
			for c, v := range row {
				bs[c] += v
			}
			p += cols
			continue
		}
		for c := 0; c < cols; c++ {
			var s float32
			for _, v := range ys[p : p+inner] {
				s += v
			}
			bs[c] += s
			p += inner
		}
	}
}

// ReLU implements Device.
func (d *CPU) ReLU(y, x Tensor) {
	if _, ok := d.same("relu", y, x); ok {
		ys, xs := f(y), f(x)
		xs = xs[:len(ys)]
		// Branch-free: random signs would make a branch mispredict half the time. The SIMD
		// prefix does the same bit operation.
		for i := reluVector(ys, xs); i < len(xs); i++ {
			b := math.Float32bits(xs[i])
			ys[i] = math.Float32frombits(b &^ uint32(int32(b)>>31))
		}
	}
}

// ReLUBackward implements Device.
func (d *CPU) ReLUBackward(dx, dy, y Tensor) {
	if _, ok := d.same("relu backward", dx, dy, y); ok {
		dxs, dys, ys := f(dx), f(dy), f(y)
		dys, ys = dys[:len(dxs)], ys[:len(dxs)]
		for i := reluBackwardVector(dxs, dys, ys); i < len(ys); i++ {
			// mask is all ones exactly when v > 0 (as an int32, b > 0), without a branch.
			b := int32(math.Float32bits(ys[i]))
			mask := uint32((-b & ^b) >> 31)
			dxs[i] = math.Float32frombits(math.Float32bits(dys[i]) & mask)
		}
	}
}

// SoftmaxCrossEntropy implements Device.
func (d *CPU) SoftmaxCrossEntropy(logits, labels Tensor, batch, classes int, dlogits Tensor) (float64, int, error) {
	const op = "softmax cross-entropy"
	if batch <= 0 || classes <= 0 {
		d.record(fmt.Errorf("kernels: cpu: %s: batch %d, classes %d: want both positive", op, batch, classes))
		return 0, 0, d.Sync()
	}
	zs := d.fl(op, "logits", logits, batch*classes)
	ls := d.idx(op, "labels", labels, batch)
	var gs []float32
	if dlogits != nil {
		gs = d.fl(op, "dlogits", dlogits, batch*classes)
	}
	if zs == nil || ls == nil || (dlogits != nil && gs == nil) {
		return 0, 0, d.Sync()
	}
	var loss float64
	correct := 0
	inv := 1 / float64(batch)
	for r := 0; r < batch; r++ {
		z := zs[r*classes : (r+1)*classes]
		lab := int(ls[r])
		if lab < 0 || lab >= classes {
			d.record(fmt.Errorf("kernels: cpu: %s: row %d has label %d, want 0..%d", op, r, lab, classes-1))
			return 0, 0, d.Sync()
		}
		best := 0
		mx := z[0]
		for j, v := range z {
			if v > mx {
				mx, best = v, j
			}
		}
		if best == lab {
			correct++
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v - mx))
		}
		loss += math.Log(sum) - float64(z[lab]-mx)
		if gs != nil {
			g := gs[r*classes : (r+1)*classes]
			for j, v := range z {
				p := math.Exp(float64(v-mx)) / sum
				if j == lab {
					p--
				}
				g[j] = float32(p * inv)
			}
		}
	}
	return loss * inv, correct, d.Sync()
}

// SGD implements Device.
func (d *CPU) SGD(param, grad, velocity Tensor, lr, momentum, weightDecay float32) {
	n, ok := d.same("sgd", param, grad)
	if !ok {
		return
	}
	var vs []float32
	if momentum != 0 {
		if _, ok := d.same("sgd velocity", param, velocity); !ok {
			return
		}
		vs = f(velocity)
	}
	SGDStep(f(param)[:n], f(grad)[:n], vs, lr, momentum, weightDecay)
}

// SGDStep is the SGD update of Device.SGD on host slices (velocity may be nil when momentum is
// 0). It is the single definition of the update, so every backend and the optimizer agree bit
// for bit. The bulk goes through SIMD code where the platform has it (sgdVector), which rounds
// exactly as the loop below: the float32 conversions keep the compiler from fusing a multiply
// and an add into one FMA, which rounds once where the vector code rounds twice.
func SGDStep(param, grad, velocity []float32, lr, momentum, weightDecay float32) {
	grad = grad[:len(param)]
	if momentum != 0 {
		velocity = velocity[:len(param)]
	}
	done := sgdVector(param, grad, velocity, lr, momentum, weightDecay)
	if momentum == 0 {
		for i := done; i < len(param); i++ {
			g := grad[i] + float32(weightDecay*param[i])
			param[i] -= float32(lr * g)
		}
		return
	}
	for i := done; i < len(param); i++ {
		g := grad[i] + float32(weightDecay*param[i])
		v := float32(momentum*velocity[i]) + g
		velocity[i] = v
		param[i] -= float32(lr * v)
	}
}
