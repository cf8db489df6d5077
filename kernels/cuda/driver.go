//go:build cuda || cudaemu

package cuda

import "unsafe"

// devPtr is a device address.
type devPtr uintptr

// driver is what Device needs from a GPU: memory, copies, kernel launches and SGEMM on one
// device, in stream order. The real one (driver_cu.go, tag cuda) is the CUDA driver API
// through gorgonia.org/cu plus cuBLAS; the emulator (emu.go, tag cudaemu) runs the same
// kernels.cu source on host threads and SGEMM by its BLAS definition, so every test of this
// package also runs on machines without a GPU. Device calls enter before any other method and
// runtime.UnlockOSThread after.
type driver interface {
	// enter locks the calling goroutine to its OS thread and makes the device current there.
	enter() error
	describe() string // "<GPU name>/sm_XY"
	// gridLimit is the most blocks a grid-stride launch should use.
	gridLimit() int

	alloc(bytes int64) (devPtr, error)
	free(p devPtr) error
	memsetD32(p devPtr, v uint32, n int64) error
	htod(dst devPtr, src unsafe.Pointer, bytes int64) error
	dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error
	dtod(dst, src devPtr, bytes int64) error
	memInfo() (free, total int64, err error)

	// launch runs kernel k over grid blocks of threadsPerBlock threads; args holds each
	// parameter's 8 bytes (see the arg helpers).
	launch(k kernelID, grid int, args []uint64) error
	// sgemm runs count column-major SGEMMs whose operands start strideA, strideB, strideC
	// elements apart (count 1: a single SGEMM; stride 0: a shared operand).
	sgemm(g colMajorGemm, alpha float32, a devPtr, strideA int, b devPtr, strideB int, beta float32, c devPtr, strideC int, count int) error

	sync() error
	close() error
}

// kernelID names a kernel of kernels.cu.
type kernelID int

const (
	kFill kernelID = iota
	kAxpy
	kScale
	kAdd
	kMul
	kReLU
	kReLUBackward
	kAddBias
	kSumBias
	kSoftmaxXent
	kIm2col
	kCol2im
	kMaxPool2
	kMaxPool2Backward
	kSGD
	kSGDMomentum
	kSum
	numKernels
)

// kernelNames are the extern "C" names in kernels.cu, indexed by kernelID.
var kernelNames = [numKernels]string{
	"hs_fill", "hs_axpy", "hs_scale", "hs_add", "hs_mul",
	"hs_relu", "hs_relu_backward",
	"hs_add_bias", "hs_sum_bias",
	"hs_softmax_xent",
	"hs_im2col", "hs_col2im",
	"hs_maxpool2", "hs_maxpool2_backward",
	"hs_sgd", "hs_sgd_momentum",
	"hs_sum",
}

const (
	// threadsPerBlock must equal HS_THREADS in kernels.cu: the block reductions assume it.
	threadsPerBlock = 256
	// maxArgs is the most parameters any kernel of kernels.cu takes.
	maxArgs = 12
)
