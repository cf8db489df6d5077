//go:build cuda || cudaemu

package cuda

import (
	"runtime"
	"unsafe"

	"github.com/hetsync/hetsync/kernels"
)

// maxSumBlocks bounds the partial sums of the first reduction pass, so that one block can
// finish the second.
const maxSumBlocks = 1024

// Sum returns the float32 sum of x's elements, reduced on the GPU in two passes (block
// partials, then one block over the partials). It is a synchronisation point: the one float
// it returns is the only data copied to the host.
func (d *Device) Sum(x kernels.Tensor) (float32, error) {
	xt := d.fl("sum", "x", x, 0)
	if xt == nil {
		return 0, d.takeErr()
	}
	if xt.n == 0 {
		return 0, nil
	}
	out, err := d.sum(xt)
	if err != nil {
		return 0, err
	}
	return out, d.Sync()
}

func (d *Device) sum(xt *tensor) (float32, error) {
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return 0, d.takeErr()
	}
	if err := d.grow(&d.partial, maxSumBlocks*4); err != nil {
		return 0, err
	}
	grid := min(d.gridFor(xt.n), maxSumBlocks)
	d.launch("sum", kSum, grid, devArg(d.partial.ptr), ptrArg(xt), i64Arg(xt.n))
	d.launch("sum", kSum, 1, devArg(d.partial.ptr), devArg(d.partial.ptr), i64Arg(grid))
	if len(d.hostLoss) == 0 {
		d.hostLoss = make([]float32, 1)
	}
	if err := d.dtoh(unsafe.Pointer(&d.hostLoss[0]), d.partial.ptr, 1, "sum"); err != nil {
		return 0, err
	}
	return d.hostLoss[0], nil
}
