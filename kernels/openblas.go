//go:build openblas && cgo

package kernels

import "github.com/hetsync/hetsync/kernels/internal/cblas"

const openblasBuilt = true

func openblasSetThreads(n int) { cblas.SetThreads(n) }

// openblasSgemm calls cblas_sgemm on row-major dense operands.
func openblasSgemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		// a and b may be empty; BLAS would only scale c.
		for i := range c[:m*n] {
			if beta == 0 {
				c[i] = 0
			} else {
				c[i] *= beta
			}
		}
		return
	}
	cblas.Sgemm(transA, transB, m, n, k, alpha, a, b, beta, c)
}
