package kernels

import (
	"fmt"
	"math"
)

func (d *CPU) poolArgs(op string, batch, c, h, w int) bool {
	if !d.dims(op, batch, c, h, w) {
		return false
	}
	if h%2 != 0 || w%2 != 0 {
		d.record(fmt.Errorf("kernels: cpu: %s: input %d×%d, want even height and width", op, h, w))
		return false
	}
	return true
}

// MaxPool2 implements Device. Ties go to the first element in row-major window order, as in
// PyTorch.
func (d *CPU) MaxPool2(y, argmax, x Tensor, batch, c, h, w int) {
	const op = "max pool"
	if !d.poolArgs(op, batch, c, h, w) {
		return
	}
	oh, ow := h/2, w/2
	planes := batch * c
	ys := d.fl(op, "y", y, planes*oh*ow)
	xs := d.fl(op, "x", x, planes*h*w)
	as := d.idx(op, "argmax", argmax, planes*oh*ow)
	if ys == nil || xs == nil || as == nil {
		return
	}
	q := 0
	for pl := 0; pl < planes; pl++ {
		base := pl * h * w
		for i := 0; i < oh; i++ {
			r0 := xs[base+2*i*w : base+2*i*w+w]
			r1 := xs[base+2*i*w+w : base+2*i*w+2*w]
			yr, ar := ys[q:q+ow], as[q:q+ow]
			for j := range yr {
				// The first maximum in row-major window order wins (strict comparisons), as
				// in PyTorch. The comparisons select without branches: on activations the
				// winner's place is random, so a branch would mispredict about every other
				// window.
				bv, bo := r0[2*j], 0
				bv, bo = pick(r0[2*j+1] > bv, r0[2*j+1], bv, 1, bo)
				bv, bo = pick(r1[2*j] > bv, r1[2*j], bv, w, bo)
				bv, bo = pick(r1[2*j+1] > bv, r1[2*j+1], bv, w+1, bo)
				yr[j] = bv
				ar[j] = int32(base + 2*i*w + 2*j + bo)
			}
			q += ow
		}
	}
}

// MaxPool2Backward implements Device.
func (d *CPU) MaxPool2Backward(dx, dy, argmax Tensor, batch, c, h, w int) {
	const op = "max pool backward"
	if !d.poolArgs(op, batch, c, h, w) {
		return
	}
	n := batch * c * (h / 2) * (w / 2)
	dxs := d.fl(op, "dx", dx, batch*c*h*w)
	dys := d.fl(op, "dy", dy, n)
	as := d.idx(op, "argmax", argmax, n)
	if dxs == nil || dys == nil || as == nil {
		return
	}
	clear(dxs)
	for q, g := range dys {
		i := int(as[q])
		if i < 0 || i >= len(dxs) {
			d.record(fmt.Errorf("kernels: cpu: %s: argmax[%d] = %d outside the input of %d elements", op, q, i, len(dxs)))
			return
		}
		dxs[i] += g
	}
}

// b2i is 1 for true and 0 for false; the compiler makes it a SETcc, not a branch.
func b2i(c bool) int {
	if c {
		return 1
	}
	return 0
}

// pick returns (v, o) when c and (bv, bo) otherwise, selecting through masks, without a branch.
func pick(c bool, v, bv float32, o, bo int) (float32, int) {
	m := -b2i(c)
	vb := (math.Float32bits(v) & uint32(m)) | (math.Float32bits(bv) &^ uint32(m))
	return math.Float32frombits(vb), (o & m) | (bo &^ m)
}
