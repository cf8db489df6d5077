//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"math"
	"runtime"

	"github.com/hetsync/hetsync/kernels"
)

// Gemm implements kernels.Device with cuBLAS SGEMM (FP32 math, no TF32).
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b kernels.Tensor, beta float32, c kernels.Tensor) {
	const op = "gemm"
	if !d.dims(op, m, n, k) {
		return
	}
	if m > math.MaxInt32 || n > math.MaxInt32 || k > math.MaxInt32 {
		d.record(fmt.Errorf("kernels/cuda: %s: gemm: m=%d n=%d k=%d exceeds cuBLAS's 32-bit dimensions", d.cfg.Device, m, n, k))
		return
	}
	at, bt, ct := d.fl(op, "a", a, m*k), d.fl(op, "b", b, k*n), d.fl(op, "c", c, m*n)
	if at == nil || bt == nil || ct == nil || m == 0 || n == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		d.gemm(transA, transB, m, n, k, alpha, at.ptr, 0, bt.ptr, 0, beta, ct.ptr, 0, 1)
	}
}

// elementwise launches fn over n elements with the given leading arguments and n last.
func (d *Device) elementwise(op string, fn kernelID, n int, args ...uint64) {
	if n == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return
	}
	var all [maxArgs]uint64
	k := copy(all[:], args)
	all[k] = i64Arg(n)
	d.launch(op, fn, d.gridFor(n), all[:k+1]...)
}

// Fill implements kernels.Device.
func (d *Device) Fill(x kernels.Tensor, v float32) {
	if n, ok := d.same("fill", x); ok {
		d.elementwise("fill", kFill, n, ptrArg(x.(*tensor)), f32Arg(v))
	}
}

// Copy implements kernels.Device (a device-to-device copy).
func (d *Device) Copy(dst, src kernels.Tensor) {
	n, ok := d.same("copy", dst, src)
	if !ok || n == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return
	}
	if err := d.drv.dtod(dst.(*tensor).ptr, src.(*tensor).ptr, int64(n)*4); err != nil {
		d.record(fmt.Errorf("kernels/cuda: %s: copy of %d elements: %w", d.cfg.Device, n, err))
	}
}

// Axpy implements kernels.Device.
func (d *Device) Axpy(alpha float32, x, y kernels.Tensor) {
	if n, ok := d.same("axpy", x, y); ok {
		d.elementwise("axpy", kAxpy, n, ptrArg(y.(*tensor)), ptrArg(x.(*tensor)), f32Arg(alpha))
	}
}

// Scale implements kernels.Device.
func (d *Device) Scale(alpha float32, x kernels.Tensor) {
	if n, ok := d.same("scale", x); ok {
		d.elementwise("scale", kScale, n, ptrArg(x.(*tensor)), f32Arg(alpha))
	}
}

// Add implements kernels.Device.
func (d *Device) Add(dst, a, b kernels.Tensor) {
	if n, ok := d.same("add", dst, a, b); ok {
		d.elementwise("add", kAdd, n, ptrArg(dst.(*tensor)), ptrArg(a.(*tensor)), ptrArg(b.(*tensor)))
	}
}

// Mul implements kernels.Device.
func (d *Device) Mul(dst, a, b kernels.Tensor) {
	if n, ok := d.same("mul", dst, a, b); ok {
		d.elementwise("mul", kMul, n, ptrArg(dst.(*tensor)), ptrArg(a.(*tensor)), ptrArg(b.(*tensor)))
	}
}

// ReLU implements kernels.Device.
func (d *Device) ReLU(y, x kernels.Tensor) {
	if n, ok := d.same("relu", y, x); ok {
		d.elementwise("relu", kReLU, n, ptrArg(y.(*tensor)), ptrArg(x.(*tensor)))
	}
}

// ReLUBackward implements kernels.Device.
func (d *Device) ReLUBackward(dx, dy, y kernels.Tensor) {
	if n, ok := d.same("relu backward", dx, dy, y); ok {
		d.elementwise("relu backward", kReLUBackward, n, ptrArg(dx.(*tensor)), ptrArg(dy.(*tensor)), ptrArg(y.(*tensor)))
	}
}

// AddBias implements kernels.Device.
func (d *Device) AddBias(x kernels.Tensor, outer, cols, inner int, bias kernels.Tensor) {
	const op = "add bias"
	if !d.dims(op, outer, cols, inner) {
		return
	}
	xt, bt := d.fl(op, "x", x, outer*cols*inner), d.fl(op, "bias", bias, cols)
	n := outer * cols * inner
	if xt == nil || bt == nil || n == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		d.launch(op, kAddBias, d.gridFor(n), ptrArg(xt), ptrArg(bt), i64Arg(outer), i64Arg(cols), i64Arg(inner))
	}
}

// SumBias implements kernels.Device: one block per column, a fixed summation order.
func (d *Device) SumBias(db, dy kernels.Tensor, outer, cols, inner int) {
	const op = "sum bias"
	if !d.dims(op, outer, cols, inner) {
		return
	}
	yt, bt := d.fl(op, "dy", dy, outer*cols*inner), d.fl(op, "db", db, cols)
	if yt == nil || bt == nil || cols == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		d.sumBias(bt.ptr, yt.ptr, outer, cols, inner)
	}
}

// sumBias launches hs_sum_bias; the caller has entered the device.
func (d *Device) sumBias(db, dy devPtr, outer, cols, inner int) {
	grid := max(1, min(cols, d.maxGrid))
	d.launch("sum bias", kSumBias, grid, devArg(db), devArg(dy), i64Arg(outer), i64Arg(cols), i64Arg(inner))
}

// SGD implements kernels.Device with the same update, in the same order of operations, as
// kernels.SGDStep (the GPU may fuse a multiply and an add, so results agree to rounding).
func (d *Device) SGD(param, grad, velocity kernels.Tensor, lr, momentum, weightDecay float32) {
	n, ok := d.same("sgd", param, grad)
	if !ok {
		return
	}
	if momentum == 0 {
		d.elementwise("sgd", kSGD, n, ptrArg(param.(*tensor)), ptrArg(grad.(*tensor)), f32Arg(lr), f32Arg(weightDecay))
		return
	}
	if _, ok := d.same("sgd velocity", param, velocity); !ok {
		return
	}
	d.elementwise("sgd", kSGDMomentum, n, ptrArg(param.(*tensor)), ptrArg(grad.(*tensor)), ptrArg(velocity.(*tensor)),
		f32Arg(lr), f32Arg(momentum), f32Arg(weightDecay))
}
