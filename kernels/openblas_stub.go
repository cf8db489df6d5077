//go:build !openblas || !cgo

package kernels

const openblasBuilt = false

func openblasSetThreads(int) {}

// openblasSgemm is never selected in builds without the openblas tag.
func openblasSgemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	panic("kernels: openblas engine selected in a build without the openblas tag")
}
