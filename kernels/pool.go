package kernels

import "fmt"

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
			r0 := base + 2*i*w
			r1 := r0 + w
			for j := 0; j < ow; j++ {
				bi := r0 + 2*j
				bv := xs[bi]
				if v := xs[r0+2*j+1]; v > bv {
					bv, bi = v, r0+2*j+1
				}
				if v := xs[r1+2*j]; v > bv {
					bv, bi = v, r1+2*j
				}
				if v := xs[r1+2*j+1]; v > bv {
					bv, bi = v, r1+2*j+1
				}
				ys[q] = bv
				as[q] = int32(bi)
				q++
			}
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
	for i := range dxs {
		dxs[i] = 0
	}
	for q, g := range dys {
		i := int(as[q])
		if i < 0 || i >= len(dxs) {
			d.record(fmt.Errorf("kernels: cpu: %s: argmax[%d] = %d outside the input of %d elements", op, q, i, len(dxs)))
			return
		}
		dxs[i] += g
	}
}
