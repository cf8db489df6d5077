//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/hetsync/hetsync/kernels"
)

// SoftmaxCrossEntropy implements kernels.Device. One block per row computes the row's loss,
// whether its first largest logit is the label's, and (when dlogits is not nil) the gradient;
// the host then reads batch losses and flags back and sums them in float64, like the CPU
// backend does. This is a synchronisation point.
func (d *Device) SoftmaxCrossEntropy(logits, labels kernels.Tensor, batch, classes int, dlogits kernels.Tensor) (float64, int, error) {
	const op = "softmax cross-entropy"
	if batch <= 0 || classes <= 0 {
		d.record(fmt.Errorf("kernels/cuda: %s: %s: batch %d, classes %d: want both positive", d.cfg.Device, op, batch, classes))
		return 0, 0, d.Sync()
	}
	zt, lt := d.fl(op, "logits", logits, batch*classes), d.idx(op, "labels", labels, batch)
	var gt *tensor
	if dlogits != nil {
		gt = d.fl(op, "dlogits", dlogits, batch*classes)
	}
	if zt == nil || lt == nil || (dlogits != nil && gt == nil) {
		return 0, 0, d.Sync()
	}
	loss, correct := d.softmaxXent(zt, lt, gt, batch, classes)
	return loss, correct, d.Sync()
}

func (d *Device) softmaxXent(zt, lt, gt *tensor, batch, classes int) (float64, int) {
	const op = "softmax cross-entropy"
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return 0, 0
	}
	if err := d.grow(&d.rowLoss, int64(batch)*4); err != nil {
		d.record(err)
		return 0, 0
	}
	if err := d.grow(&d.rowHit, int64(batch)*4); err != nil {
		d.record(err)
		return 0, 0
	}
	var grad uint64
	if gt != nil {
		grad = ptrArg(gt)
	}
	d.launch(op, kSoftmaxXent, max(1, min(batch, d.maxGrid)),
		ptrArg(zt), ptrArg(lt), grad, devArg(d.rowLoss.ptr), devArg(d.rowHit.ptr),
		i64Arg(batch), i64Arg(classes), f32Arg(float32(1/float64(batch))))
	if len(d.hostLoss) < batch {
		d.hostLoss = make([]float32, batch)
	}
	if len(d.hostHit) < batch {
		d.hostHit = make([]int32, batch)
	}
	hl, hh := d.hostLoss[:batch], d.hostHit[:batch]
	if err := d.dtoh(unsafe.Pointer(unsafe.SliceData(hl)), d.rowLoss.ptr, batch, op+" losses"); err != nil {
		d.record(err)
		return 0, 0
	}
	if err := d.dtoh(unsafe.Pointer(unsafe.SliceData(hh)), d.rowHit.ptr, batch, op+" hits"); err != nil {
		d.record(err)
		return 0, 0
	}
	var loss float64
	correct := 0
	for r, hit := range hh {
		if hit < 0 {
			d.record(fmt.Errorf("kernels/cuda: %s: %s: row %d has a label outside 0..%d", d.cfg.Device, op, r, classes-1))
			return 0, 0
		}
		correct += int(hit)
		loss += float64(hl[r])
	}
	return loss / float64(batch), correct
}
