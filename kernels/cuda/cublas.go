//go:build cuda

package cuda

// A minimal cuBLAS binding: one handle, SGEMM and strided-batched SGEMM on device pointers.
// gorgonia.org/cu/blas exists, but it takes device addresses disguised as []float32, panics when
// the handle cannot be created and keeps errors sticky forever; these few lines avoid all
// three. Device pointers cross into C as integers and become pointers only in C.

/*
#cgo LDFLAGS: -lcublas
#include <cublas_v2.h>

static cublasStatus_t hs_cublas_create(cublasHandle_t *h) {
	cublasStatus_t st = cublasCreate(h);
	if (st != CUBLAS_STATUS_SUCCESS) return st;
	// Plain FP32 math (no TF32 tensor-op shortcuts), so results match the CPU backend closely.
	return cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH);
}

static cublasOperation_t hs_op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

static cublasStatus_t hs_sgemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha,
		unsigned long long a, int lda, unsigned long long b, int ldb, float beta,
		unsigned long long c, int ldc) {
	return cublasSgemm(h, hs_op(ta), hs_op(tb), m, n, k, &alpha, (const float *)a, lda,
		(const float *)b, ldb, &beta, (float *)c, ldc);
}

static cublasStatus_t hs_sgemm_strided(cublasHandle_t h, int ta, int tb, int m, int n, int k,
		float alpha, unsigned long long a, int lda, long long sa, unsigned long long b, int ldb,
		long long sb, float beta, unsigned long long c, int ldc, long long sc, int count) {
	return cublasSgemmStridedBatched(h, hs_op(ta), hs_op(tb), m, n, k, &alpha, (const float *)a,
		lda, sa, (const float *)b, ldb, sb, &beta, (float *)c, ldc, sc, count);
}
*/
import "C"

import "fmt"

type cublasHandle struct{ h C.cublasHandle_t }

// newCublas creates a handle in the context current on the calling (locked) thread.
func newCublas() (*cublasHandle, error) {
	var h C.cublasHandle_t
	if st := C.hs_cublas_create(&h); st != C.CUBLAS_STATUS_SUCCESS {
		return nil, cublasError("create", st)
	}
	return &cublasHandle{h: h}, nil
}

func (h *cublasHandle) close() error {
	if h == nil || h.h == nil {
		return nil
	}
	st := C.cublasDestroy(h.h)
	h.h = nil
	if st != C.CUBLAS_STATUS_SUCCESS {
		return cublasError("destroy", st)
	}
	return nil
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// sgemm is one column-major SGEMM (see rowMajorGemm for the row-major mapping).
func (h *cublasHandle) sgemm(g colMajorGemm, alpha float32, a, b devPtr, beta float32, c devPtr) error {
	st := C.hs_sgemm(h.h, cbool(g.transA), cbool(g.transB), C.int(g.m), C.int(g.n), C.int(g.k), C.float(alpha),
		C.ulonglong(a), C.int(g.lda), C.ulonglong(b), C.int(g.ldb), C.float(beta), C.ulonglong(c), C.int(g.ldc))
	if st != C.CUBLAS_STATUS_SUCCESS {
		return cublasError(fmt.Sprintf("sgemm %+v", g), st)
	}
	return nil
}

// sgemmStrided is count SGEMMs with operands strideA, strideB, strideC elements apart.
func (h *cublasHandle) sgemmStrided(g colMajorGemm, alpha float32, a devPtr, strideA int, b devPtr, strideB int, beta float32, c devPtr, strideC int, count int) error {
	st := C.hs_sgemm_strided(h.h, cbool(g.transA), cbool(g.transB), C.int(g.m), C.int(g.n), C.int(g.k), C.float(alpha),
		C.ulonglong(a), C.int(g.lda), C.longlong(strideA), C.ulonglong(b), C.int(g.ldb), C.longlong(strideB),
		C.float(beta), C.ulonglong(c), C.int(g.ldc), C.longlong(strideC), C.int(count))
	if st != C.CUBLAS_STATUS_SUCCESS {
		return cublasError(fmt.Sprintf("strided batched sgemm %+v count=%d", g, count), st)
	}
	return nil
}

func cublasError(what string, st C.cublasStatus_t) error {
	name := map[C.cublasStatus_t]string{
		C.CUBLAS_STATUS_NOT_INITIALIZED:  "NOT_INITIALIZED",
		C.CUBLAS_STATUS_ALLOC_FAILED:     "ALLOC_FAILED",
		C.CUBLAS_STATUS_INVALID_VALUE:    "INVALID_VALUE",
		C.CUBLAS_STATUS_ARCH_MISMATCH:    "ARCH_MISMATCH",
		C.CUBLAS_STATUS_MAPPING_ERROR:    "MAPPING_ERROR",
		C.CUBLAS_STATUS_EXECUTION_FAILED: "EXECUTION_FAILED",
		C.CUBLAS_STATUS_INTERNAL_ERROR:   "INTERNAL_ERROR",
		C.CUBLAS_STATUS_NOT_SUPPORTED:    "NOT_SUPPORTED",
		C.CUBLAS_STATUS_LICENSE_ERROR:    "LICENSE_ERROR",
	}[st]
	if name == "" {
		name = fmt.Sprintf("status %d", int(st))
	}
	return fmt.Errorf("kernels/cuda: cublas %s: CUBLAS_STATUS_%s", what, name)
}
