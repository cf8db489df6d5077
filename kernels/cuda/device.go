//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/hetsync/hetsync/kernels"
)

// Built reports whether this binary was built with CUDA support (the cuda build tag, or the
// cudaemu test emulator).
const Built = true

// Device is a kernels.Device on one GPU. Like every kernels.Device it is driven by one
// goroutine at a time. Ops are queued on the GPU's default stream and return at once; errors of
// bad arguments are recorded and returned by the next Sync, errors of the GPU itself surface
// at the next synchronising call (Sync, Download, SoftmaxCrossEntropy, Sum).
type Device struct {
	cfg     Config
	drv     driver
	name    string
	err     error
	closed  bool
	maxGrid int // blocks per grid-stride launch

	// arg holds the current launch's arguments, 8 bytes each; reused, so launching
	// allocates nothing.
	arg [maxArgs]uint64

	// scratch reused between calls (grown, never shrunk): per-row loss and hit flags of
	// SoftmaxCrossEntropy, partial sums of Sum, the im2col workspace of the convolutions.
	rowLoss, rowHit, partial, col devBuf
	hostLoss                      []float32 // also Sum's result (cgo may only see pointer-free memory)
	hostHit                       []int32
}

// devBuf is device scratch memory that grows on demand.
type devBuf struct {
	ptr   devPtr
	bytes int64
}

// tensor is a Device's kernels.Tensor: n float32 or int32 elements of device memory.
type tensor struct {
	dev   *Device
	ptr   devPtr
	n     int
	index bool
	base  *tensor // the allocation a view shares; nil for an allocation
	freed bool
}

func (t *tensor) Len() int    { return t.n }
func (t *tensor) Index() bool { return t.index }

func (t *tensor) dead() bool { return t.freed || (t.base != nil && t.base.freed) }

// at is the address of element i.
func (t *tensor) at(i int) devPtr { return t.ptr + devPtr(4*i) }

var _ kernels.Device = (*Device)(nil)

// Open opens the GPU that cfg names as a kernels.Device.
func Open(cfg Config) (kernels.Device, error) {
	d, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// New opens the GPU that cfg names: it retains the device's primary context, loads the
// embedded PTX (the driver JIT-compiles it for this GPU) and creates a cuBLAS handle.
func New(cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ordinal, _ := ParseDevice(cfg.Device)
	drv, err := openDriver(ordinal)
	if err != nil {
		return nil, fmt.Errorf("kernels/cuda: %s: %w", cfg.Device, err)
	}
	return &Device{
		cfg:     cfg,
		drv:     drv,
		name:    fmt.Sprintf("cuda:%d/%s", ordinal, drv.describe()),
		maxGrid: max(1, drv.gridLimit()),
	}, nil
}

// Close waits for queued work, frees the device's scratch memory and releases the GPU.
// Tensors still allocated are released with the context once no other user of the GPU's
// primary context remains. The Device is unusable afterwards.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	defer runtime.UnlockOSThread()
	var errs []error
	if err := d.drv.enter(); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, d.drv.sync())
		for _, b := range []*devBuf{&d.rowLoss, &d.rowHit, &d.partial, &d.col} {
			if b.ptr != 0 {
				errs = append(errs, d.drv.free(b.ptr))
				*b = devBuf{}
			}
		}
	}
	errs = append(errs, d.drv.close())
	d.closed = true
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kernels/cuda: %s: close: %w", d.cfg.Device, err)
	}
	return nil
}

// Name implements kernels.Device: "cuda:N/<GPU name>/sm_XY".
func (d *Device) Name() string { return d.name }

// Threads implements kernels.Device: one host thread drives the GPU.
func (d *Device) Threads() int { return 1 }

// enter locks the calling goroutine to its OS thread and makes the device's context current
// there (CUDA contexts are current per OS thread). Every method that touches the driver calls
// it and defers runtime.UnlockOSThread, whether or not it succeeds.
func (d *Device) enter() bool {
	if d.closed {
		runtime.LockOSThread() // balance the caller's deferred unlock
		d.record(fmt.Errorf("kernels/cuda: %s: device is closed", d.cfg.Device))
		return false
	}
	if err := d.drv.enter(); err != nil {
		d.record(fmt.Errorf("kernels/cuda: %s: making the context current: %w", d.cfg.Device, err))
		return false
	}
	return true
}

func (d *Device) record(err error) {
	if d.err == nil && err != nil {
		d.err = err
	}
}

func (d *Device) takeErr() error {
	err := d.err
	d.err = nil
	return err
}

// Sync implements kernels.Device: it waits for the GPU and returns the first error recorded
// since the previous Sync, or the GPU's own error.
func (d *Device) Sync() error {
	defer runtime.UnlockOSThread()
	if d.enter() {
		if err := d.drv.sync(); err != nil {
			d.record(fmt.Errorf("kernels/cuda: %s: %w", d.cfg.Device, err))
		}
	}
	return d.takeErr()
}

// Alloc implements kernels.Device.
func (d *Device) Alloc(n int) (kernels.Tensor, error) { return d.alloc(n, false) }

// AllocIndex implements kernels.Device.
func (d *Device) AllocIndex(n int) (kernels.Tensor, error) { return d.alloc(n, true) }

func (d *Device) alloc(n int, index bool) (kernels.Tensor, error) {
	if n < 0 {
		return nil, fmt.Errorf("kernels/cuda: %s: alloc of %d elements", d.cfg.Device, n)
	}
	t := &tensor{dev: d, n: n, index: index}
	if n == 0 {
		return t, nil
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return nil, d.takeErr()
	}
	p, err := d.drv.alloc(int64(n) * 4)
	if err != nil {
		return nil, fmt.Errorf("kernels/cuda: %s: alloc of %d elements (%d bytes): %w", d.cfg.Device, n, int64(n)*4, err)
	}
	if err := d.drv.memsetD32(p, 0, int64(n)); err != nil {
		d.drv.free(p)
		return nil, fmt.Errorf("kernels/cuda: %s: zeroing %d elements: %w", d.cfg.Device, n, err)
	}
	t.ptr = p
	return t, nil
}

// View implements kernels.Device.
func (d *Device) View(t kernels.Tensor, off, n int) (kernels.Tensor, error) {
	c, ok := t.(*tensor)
	if !ok || c == nil || c.dev != d || c.dead() {
		return nil, fmt.Errorf("kernels/cuda: %s: view of %s", d.cfg.Device, describe(t))
	}
	if off < 0 || n < 0 || off+n > c.n {
		return nil, fmt.Errorf("kernels/cuda: %s: view [%d, %d) of a tensor of %d elements", d.cfg.Device, off, off+n, c.n)
	}
	base := c
	if c.base != nil {
		base = c.base
	}
	return &tensor{dev: d, ptr: c.at(off), n: n, index: c.index, base: base}, nil
}

// Free implements kernels.Device. Freeing a view only forgets the view.
func (d *Device) Free(t kernels.Tensor) {
	c, ok := t.(*tensor)
	if !ok || c == nil || c.dev != d || c.freed {
		return
	}
	c.freed = true
	if c.base != nil || c.ptr == 0 {
		return
	}
	defer runtime.UnlockOSThread()
	if d.enter() {
		if err := d.drv.free(c.ptr); err != nil {
			d.record(fmt.Errorf("kernels/cuda: %s: free of %d elements: %w", d.cfg.Device, c.n, err))
		}
	}
	c.ptr = 0
}

// Upload implements kernels.Device (a synchronous host-to-device copy).
func (d *Device) Upload(dst kernels.Tensor, src []float32) error {
	c, ok := dst.(*tensor)
	if !ok || c == nil || c.dev != d || c.dead() || c.index || len(src) > c.n {
		return fmt.Errorf("kernels/cuda: %s: upload of %d values into %s", d.cfg.Device, len(src), describe(dst))
	}
	return d.htod(c.ptr, unsafe.Pointer(unsafe.SliceData(src)), len(src), "upload")
}

// UploadIndex implements kernels.Device.
func (d *Device) UploadIndex(dst kernels.Tensor, src []int32) error {
	c, ok := dst.(*tensor)
	if !ok || c == nil || c.dev != d || c.dead() || !c.index || len(src) > c.n {
		return fmt.Errorf("kernels/cuda: %s: index upload of %d values into %s", d.cfg.Device, len(src), describe(dst))
	}
	return d.htod(c.ptr, unsafe.Pointer(unsafe.SliceData(src)), len(src), "index upload")
}

func (d *Device) htod(dst devPtr, src unsafe.Pointer, n int, what string) error {
	if n == 0 {
		return nil
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return d.takeErr()
	}
	if err := d.drv.htod(dst, src, int64(n)*4); err != nil {
		return fmt.Errorf("kernels/cuda: %s: %s of %d values: %w", d.cfg.Device, what, n, err)
	}
	return nil
}

// Download implements kernels.Device (a synchronous device-to-host copy: it waits for the ops
// queued before it).
func (d *Device) Download(dst []float32, src kernels.Tensor) error {
	c, ok := src.(*tensor)
	if !ok || c == nil || c.dev != d || c.dead() || c.index || len(dst) > c.n {
		return fmt.Errorf("kernels/cuda: %s: download of %d values from %s", d.cfg.Device, len(dst), describe(src))
	}
	return d.dtoh(unsafe.Pointer(unsafe.SliceData(dst)), c.ptr, len(dst), "download")
}

func (d *Device) dtoh(dst unsafe.Pointer, src devPtr, n int, what string) error {
	if n == 0 {
		return nil
	}
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return d.takeErr()
	}
	if err := d.drv.dtoh(dst, src, int64(n)*4); err != nil {
		return fmt.Errorf("kernels/cuda: %s: %s of %d values: %w", d.cfg.Device, what, n, err)
	}
	return nil
}

func describe(t kernels.Tensor) string {
	switch c := t.(type) {
	case nil:
		return "a nil tensor"
	case *tensor:
		switch {
		case c == nil:
			return "a nil tensor"
		case c.dead():
			return fmt.Sprintf("a freed tensor of %d elements", c.n)
		case c.index:
			return fmt.Sprintf("an index tensor of %d elements", c.n)
		}
		return fmt.Sprintf("a float32 tensor of %d elements", c.n)
	}
	return fmt.Sprintf("a %T from another device", t)
}

// fl returns t as a live float32 tensor of this device with at least n elements, or records
// why not and returns nil.
func (d *Device) fl(op, arg string, t kernels.Tensor, n int) *tensor {
	c, ok := t.(*tensor)
	if ok && c != nil && c.dev == d && !c.dead() && !c.index && n >= 0 && c.n >= n {
		return c
	}
	d.record(fmt.Errorf("kernels/cuda: %s: %s: %s is %s, want a float32 tensor of this device with at least %d elements", d.cfg.Device, op, arg, describe(t), n))
	return nil
}

// idx is fl for index tensors.
func (d *Device) idx(op, arg string, t kernels.Tensor, n int) *tensor {
	c, ok := t.(*tensor)
	if ok && c != nil && c.dev == d && !c.dead() && c.index && n >= 0 && c.n >= n {
		return c
	}
	d.record(fmt.Errorf("kernels/cuda: %s: %s: %s is %s, want an index tensor of this device with at least %d elements", d.cfg.Device, op, arg, describe(t), n))
	return nil
}

// same returns the common length of float32 tensors ts, recording an error when a tensor is
// not one of this device's or the lengths differ.
func (d *Device) same(op string, ts ...kernels.Tensor) (int, bool) {
	n := -1
	for _, t := range ts {
		c, ok := t.(*tensor)
		if !ok || c == nil || c.dev != d || c.dead() || c.index {
			d.record(fmt.Errorf("kernels/cuda: %s: %s: operand is %s", d.cfg.Device, op, describe(t)))
			return 0, false
		}
		if n >= 0 && c.n != n {
			d.record(fmt.Errorf("kernels/cuda: %s: %s: operand lengths differ (%d and %d)", d.cfg.Device, op, n, c.n))
			return 0, false
		}
		n = c.n
	}
	return n, true
}

func (d *Device) dims(op string, ds ...int) bool {
	for _, v := range ds {
		if v < 0 {
			// A copy, so that ds does not escape and the happy path allocates nothing.
			d.record(fmt.Errorf("kernels/cuda: %s: %s: negative dimension in %v", d.cfg.Device, op, slices.Clone(ds)))
			return false
		}
	}
	return true
}

// grow makes b hold at least bytes bytes; the old contents are not kept. The caller has
// entered the device.
func (d *Device) grow(b *devBuf, bytes int64) error {
	if b.bytes >= bytes {
		return nil
	}
	if b.ptr != 0 {
		if err := d.drv.free(b.ptr); err != nil {
			return fmt.Errorf("kernels/cuda: %s: freeing scratch: %w", d.cfg.Device, err)
		}
		*b = devBuf{}
	}
	p, err := d.drv.alloc(bytes)
	if err != nil {
		return fmt.Errorf("kernels/cuda: %s: scratch of %d bytes: %w", d.cfg.Device, bytes, err)
	}
	*b = devBuf{ptr: p, bytes: bytes}
	return nil
}

// gridFor returns the number of blocks for a grid-stride loop over n elements.
func (d *Device) gridFor(n int) int {
	blocks := (n + threadsPerBlock - 1) / threadsPerBlock
	return max(1, min(blocks, d.maxGrid))
}

// launch runs kernel k with the given grid and arguments (at most maxArgs, 8 bytes each); the
// caller has entered the device.
func (d *Device) launch(op string, k kernelID, grid int, args ...uint64) {
	n := copy(d.arg[:], args)
	if err := d.drv.launch(k, grid, d.arg[:n]); err != nil {
		d.record(fmt.Errorf("kernels/cuda: %s: %s: launching %s: %w", d.cfg.Device, op, kernelNames[k], err))
	}
}

// Launch arguments: a float32 kernel parameter reads the low 4 bytes of its slot
// (little-endian), an int64 or pointer parameter all 8.
func ptrArg(t *tensor) uint64 { return uint64(t.ptr) }
func devArg(p devPtr) uint64  { return uint64(p) }
func f32Arg(v float32) uint64 { return uint64(math.Float32bits(v)) }
func i64Arg(v int) uint64     { return uint64(int64(v)) }

// gemm runs c = alpha·op(a)·op(b) + beta·c on row-major operands through the driver's
// column-major SGEMM, count times with the given element strides (count 1: once).
func (d *Device) gemm(transA, transB bool, m, n, k int, alpha float32, a devPtr, strideA int, b devPtr, strideB int, beta float32, c devPtr, strideC int, count int) {
	g := rowMajorGemm(transA, transB, m, n, k)
	// cᵀ = op(b)ᵀ·op(a)ᵀ: the column-major A operand is b.
	if err := d.drv.sgemm(g, alpha, b, strideB, a, strideA, beta, c, strideC, count); err != nil {
		d.record(fmt.Errorf("kernels/cuda: %s: %w", d.cfg.Device, err))
	}
}

// MemInfo reports the GPU's free and total memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	defer runtime.UnlockOSThread()
	if !d.enter() {
		return 0, 0, d.takeErr()
	}
	return d.drv.memInfo()
}
