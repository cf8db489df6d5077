//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"math"
	"runtime"

	"github.com/hetsync/hetsync/kernels"
)

func (d *Device) poolArgs(op string, batch, c, h, w int) bool {
	if !d.dims(op, batch, c, h, w) {
		return false
	}
	if int64(batch)*int64(c)*int64(h)*int64(w) > math.MaxInt32 {
		d.record(fmt.Errorf("kernels/cuda: %s: %s: %d×%d×%d×%d input has more elements than int32 argmax indices can address", d.cfg.Device, op, batch, c, h, w))
		return false
	}
	if h%2 != 0 || w%2 != 0 {
		d.record(fmt.Errorf("kernels/cuda: %s: %s: %d×%d input, want even height and width", d.cfg.Device, op, h, w))
		return false
	}
	return true
}

// MaxPool2 implements kernels.Device. Like the CPU backend, argmax holds the flat index into x
// of each output's input, and the first maximum in row-major window order wins ties.
func (d *Device) MaxPool2(y, argmax, x kernels.Tensor, batch, c, h, w int) {
	const op = "max pool"
	if !d.poolArgs(op, batch, c, h, w) {
		return
	}
	planes := batch * c
	outs := planes * (h / 2) * (w / 2)
	yt, at, xt := d.fl(op, "y", y, outs), d.idx(op, "argmax", argmax, outs), d.fl(op, "x", x, planes*h*w)
	if yt == nil || at == nil || xt == nil || outs == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		d.launch(op, kMaxPool2, d.gridFor(outs), ptrArg(yt), ptrArg(at), ptrArg(xt), i64Arg(planes), i64Arg(h), i64Arg(w))
	}
}

// MaxPool2Backward implements kernels.Device as a gather over dx (no atomics).
func (d *Device) MaxPool2Backward(dx, dy, argmax kernels.Tensor, batch, c, h, w int) {
	const op = "max pool backward"
	if !d.poolArgs(op, batch, c, h, w) {
		return
	}
	planes := batch * c
	outs := planes * (h / 2) * (w / 2)
	xt, yt, at := d.fl(op, "dx", dx, planes*h*w), d.fl(op, "dy", dy, outs), d.idx(op, "argmax", argmax, outs)
	if xt == nil || yt == nil || at == nil || planes*h*w == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		d.launch(op, kMaxPool2Backward, d.gridFor(planes*h*w), ptrArg(xt), ptrArg(yt), ptrArg(at), i64Arg(planes), i64Arg(h), i64Arg(w))
	}
}
