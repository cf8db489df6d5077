//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"runtime"

	"github.com/hetsync/hetsync/kernels"
)

// Convolution lowers to GEMM through im2col, like the CPU backend: a sample's receptive
// fields become a (C·KH·KW)×(OutH·OutW) matrix, so the sample's output is W·cols. im2col runs
// over a chunk of samples at once and one strided-batched GEMM multiplies the whole chunk;
// chunks are as large as Config.ConvWorkspaceBytes allows.

func (d *Device) convArgs(op string, batch int, s kernels.ConvShape) bool {
	if err := s.Validate(); err != nil {
		d.record(fmt.Errorf("kernels/cuda: %s: %s: %w", d.cfg.Device, op, err))
		return false
	}
	return d.dims(op, batch)
}

// convChunk returns how many samples one im2col workspace holds and makes sure it exists.
func (d *Device) convChunk(batch int, s kernels.ConvShape) (int, bool) {
	per := int64(s.C*s.KH*s.KW) * int64(s.OutH()*s.OutW()) * 4
	chunk := int(max(1, d.cfg.convWorkspaceBytes()/per))
	chunk = min(chunk, batch)
	if err := d.grow(&d.col, int64(chunk)*per); err != nil {
		d.record(err)
		return 0, false
	}
	return chunk, true
}

func (d *Device) im2col(op string, col, x devPtr, nb int, s kernels.ConvShape, back bool) {
	fn, n := kIm2col, nb*s.C*s.KH*s.KW*s.OutH()*s.OutW()
	if back {
		fn, n = kCol2im, nb*s.InLen()
	}
	stride := max(1, s.Stride)
	// hs_col2im(dx, col, ...) and hs_im2col(col, x, ...) take the destination first.
	dst, src := col, x
	if back {
		dst, src = x, col
	}
	d.launch(op, fn, d.gridFor(n), devArg(dst), devArg(src), i64Arg(nb), i64Arg(s.C), i64Arg(s.H), i64Arg(s.W),
		i64Arg(s.KH), i64Arg(s.KW), i64Arg(s.Pad), i64Arg(stride), i64Arg(s.OutH()), i64Arg(s.OutW()))
}

// Conv2D implements kernels.Device.
func (d *Device) Conv2D(y, x, w, bias kernels.Tensor, batch int, s kernels.ConvShape) {
	const op = "conv2d"
	if !d.convArgs(op, batch, s) {
		return
	}
	yt, xt := d.fl(op, "y", y, batch*s.OutLen()), d.fl(op, "x", x, batch*s.InLen())
	wt, bt := d.fl(op, "w", w, s.WeightLen()), d.fl(op, "bias", bias, s.Out)
	if yt == nil || xt == nil || wt == nil || bt == nil || batch == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return
	}
	chunk, ok := d.convChunk(batch, s)
	if !ok {
		return
	}
	rows, cols := s.C*s.KH*s.KW, s.OutH()*s.OutW()
	for n0 := 0; n0 < batch; n0 += chunk {
		nb := min(chunk, batch-n0)
		d.im2col(op, d.col.ptr, xt.at(n0*s.InLen()), nb, s, false)
		// y_n (Out×cols) = W (Out×rows) · col_n (rows×cols), for every n of the chunk.
		d.gemm(false, false, s.Out, cols, rows, 1, wt.ptr, 0, d.col.ptr, rows*cols, 0, yt.at(n0*s.OutLen()), s.OutLen(), nb)
	}
	n := batch * s.OutLen()
	d.launch(op, kAddBias, d.gridFor(n), ptrArg(yt), ptrArg(bt), i64Arg(batch), i64Arg(s.Out), i64Arg(cols))
}

// Conv2DBackward implements kernels.Device.
func (d *Device) Conv2DBackward(dx, dw, db, dy, x, w kernels.Tensor, batch int, s kernels.ConvShape) {
	const op = "conv2d backward"
	if !d.convArgs(op, batch, s) {
		return
	}
	yt, xt := d.fl(op, "dy", dy, batch*s.OutLen()), d.fl(op, "x", x, batch*s.InLen())
	wt, dwt, dbt := d.fl(op, "w", w, s.WeightLen()), d.fl(op, "dw", dw, s.WeightLen()), d.fl(op, "db", db, s.Out)
	var dxt *tensor
	if dx != nil {
		dxt = d.fl(op, "dx", dx, batch*s.InLen())
	}
	if yt == nil || xt == nil || wt == nil || dwt == nil || dbt == nil || (dx != nil && dxt == nil) {
		return
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return
	}
	rows, cols := s.C*s.KH*s.KW, s.OutH()*s.OutW()
	d.sumBias(dbt.ptr, yt.ptr, batch, s.Out, cols)
	if batch == 0 {
		if err := d.drv.memsetD32(dwt.ptr, 0, int64(s.WeightLen())); err != nil {
			d.record(fmt.Errorf("kernels/cuda: %s: %s: zeroing dw: %w", d.cfg.Device, op, err))
		}
		return
	}
	chunk, ok := d.convChunk(batch, s)
	if !ok {
		return
	}
	for n0 := 0; n0 < batch; n0 += chunk {
		nb := min(chunk, batch-n0)
		d.im2col(op, d.col.ptr, xt.at(n0*s.InLen()), nb, s, false)
		// dW += dy_n (Out×cols) · col_nᵀ (cols×rows), sample by sample into one accumulator.
		for i := 0; i < nb; i++ {
			beta := float32(1)
			if n0+i == 0 {
				beta = 0
			}
			d.gemm(false, true, s.Out, rows, cols, 1, yt.at((n0+i)*s.OutLen()), 0, d.col.ptr+devPtr(4*i*rows*cols), 0, beta, dwt.ptr, 0, 1)
		}
		if dxt == nil {
			continue
		}
		// dcol_n (rows×cols) = Wᵀ (rows×Out) · dy_n (Out×cols), written over the chunk's
		// columns (no longer needed), then scattered back to images by col2im.
		d.gemm(true, false, rows, cols, s.Out, 1, wt.ptr, 0, yt.at(n0*s.OutLen()), s.OutLen(), 0, d.col.ptr, rows*cols, nb)
		d.im2col(op, d.col.ptr, dxt.at(n0*s.InLen()), nb, s, true)
	}
}
