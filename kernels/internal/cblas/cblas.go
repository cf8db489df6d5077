//go:build openblas && cgo

// Package cblas binds the two OpenBLAS functions the CPU backend needs. It lives apart from
// package kernels because Go does not allow cgo and Go assembly in one package. It is only
// built with the openblas tag and never called for anything but SGEMM and thread control.
package cblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import "unsafe"

// SetThreads sets OpenBLAS's process-wide thread count.
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Sgemm computes c = alpha·op(a)·op(b) + beta·c for row-major dense operands with op(a) m×k,
// op(b) k×n. The caller guarantees the slices are long enough and m, n, k > 0.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	var ta, tb uint32 = C.CblasNoTrans, C.CblasNoTrans
	lda, ldb := k, n
	if transA {
		ta, lda = C.CblasTrans, m
	}
	if transB {
		tb, ldb = C.CblasTrans, k
	}
	C.cblas_sgemm(C.CblasRowMajor, C.enum_CBLAS_TRANSPOSE(ta), C.enum_CBLAS_TRANSPOSE(tb),
		C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(n))
}
