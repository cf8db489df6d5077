//go:build cuda

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
)

// kernelsPTX is kernels.cu compiled by `make ptx` (nvcc -ptx -arch=compute_52). The driver
// JIT-compiles it for the GPU at hand when the device opens.
//
//go:embed kernels.ptx
var kernelsPTX string

// emulated tells tests that kernels run on a real GPU.
const emulated = false

// cuDriver is the real driver: gorgonia.org/cu for the driver API, cublas.go for SGEMM. It
// uses the device's primary context and the default stream, which cuBLAS also uses, so
// kernels, copies and GEMMs run in the order they were issued.
type cuDriver struct {
	dev  cu.Device
	ctx  cu.CUContext
	name string
	sms  int
	mod  cu.Module
	fn   [numKernels]cu.Function
	blas *cublasHandle
	argp [maxArgs]unsafe.Pointer // argp[i] points at the launch's args[i]
}

// minDriverVersion is CUDA 11.8 (driver 520): the oldest that JIT-compiles PTX ISA 7.8.
const minDriverVersion = 11080

func openDriver(ordinal int) (driver, error) {
	if v := cu.Version(); v < minDriverVersion {
		return nil, fmt.Errorf("the NVIDIA driver supports CUDA %d.%d; the embedded PTX needs CUDA 11.8 (driver ≥ 520)", v/1000, v%1000/10)
	}
	count, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("counting devices: %w", err)
	}
	if ordinal >= count {
		return nil, fmt.Errorf("this machine has %d CUDA device(s) (after CUDA_VISIBLE_DEVICES)", count)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := &cuDriver{dev: dev}
	if d.ctx, err = dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("retaining the primary context: %w", err)
	}
	fail := func(what string, err error) (driver, error) {
		d.close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fail("making the context current", err)
	}
	name, err := dev.Name()
	if err != nil {
		return fail("device name", err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return fail("compute capability", err)
	}
	if major < 5 || (major == 5 && minor < 2) {
		return fail("compute capability", fmt.Errorf("%s is sm_%d%d; the embedded PTX needs sm_52 or newer", name, major, minor))
	}
	d.name = fmt.Sprintf("%s/sm_%d%d", name, major, minor)
	if d.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return fail("multiprocessor count", err)
	}
	if d.mod, err = cu.LoadData(kernelsPTX); err != nil {
		return fail("loading the embedded PTX", err)
	}
	for k, name := range kernelNames {
		if d.fn[k], err = d.mod.Function(name); err != nil {
			return fail("kernel "+name, err)
		}
	}
	if d.blas, err = newCublas(); err != nil {
		return fail("cuBLAS", err)
	}
	return d, nil
}

func (d *cuDriver) enter() error {
	runtime.LockOSThread()
	return cu.SetCurrentContext(d.ctx)
}

func (d *cuDriver) describe() string { return d.name }

// gridLimit allows 32 blocks of 256 threads per multiprocessor: enough to fill every SM at
// full occupancy, few enough that each thread of a grid-stride loop handles several elements.
func (d *cuDriver) gridLimit() int { return max(1, d.sms) * 32 }

func (d *cuDriver) alloc(bytes int64) (devPtr, error) {
	p, err := cu.MemAlloc(bytes)
	return devPtr(p), err
}

func (d *cuDriver) free(p devPtr) error { return cu.MemFree(cu.DevicePtr(p)) }

func (d *cuDriver) memsetD32(p devPtr, v uint32, n int64) error {
	return cu.MemsetD32(cu.DevicePtr(p), v, n)
}

func (d *cuDriver) htod(dst devPtr, src unsafe.Pointer, bytes int64) error {
	return cu.MemcpyHtoD(cu.DevicePtr(dst), src, bytes)
}

func (d *cuDriver) dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error {
	return cu.MemcpyDtoH(dst, cu.DevicePtr(src), bytes)
}

func (d *cuDriver) dtod(dst, src devPtr, bytes int64) error {
	return cu.MemcpyDtoD(cu.DevicePtr(dst), cu.DevicePtr(src), bytes)
}

func (d *cuDriver) memInfo() (free, total int64, err error) { return cu.MemInfo() }

// launch passes args through cu's Function.Launch, which copies 8 bytes from every argument
// pointer: a float32 parameter reads the low 4 (little-endian), an int64 or pointer all 8.
func (d *cuDriver) launch(k kernelID, grid int, args []uint64) error {
	for i := range args {
		d.argp[i] = unsafe.Pointer(&args[i])
	}
	err := d.fn[k].Launch(grid, 1, 1, threadsPerBlock, 1, 1, 0, cu.NoStream, d.argp[:len(args)])
	clear(d.argp[:len(args)])
	return err
}

func (d *cuDriver) sgemm(g colMajorGemm, alpha float32, a devPtr, strideA int, b devPtr, strideB int, beta float32, c devPtr, strideC int, count int) error {
	if count == 1 {
		return d.blas.sgemm(g, alpha, a, b, beta, c)
	}
	return d.blas.sgemmStrided(g, alpha, a, strideA, b, strideB, beta, c, strideC, count)
}

func (d *cuDriver) sync() error { return cu.Synchronize() }

// close releases what openDriver acquired; the caller holds the OS thread with the context
// current (or the context was never made).
func (d *cuDriver) close() error {
	var errs []error
	errs = append(errs, d.blas.close())
	d.blas = nil
	if d.mod != (cu.Module{}) {
		errs = append(errs, d.mod.Unload())
		d.mod = cu.Module{}
	}
	if d.ctx != (cu.CUContext{}) {
		errs = append(errs, d.dev.ReleasePrimaryCtx())
		d.ctx = cu.CUContext{}
	}
	return errors.Join(errs...)
}
