//go:build !amd64 || purego

package kernels

// sgdVector has no SIMD version on this platform: SGDStep's Go loop does everything.
func sgdVector(param, grad, velocity []float32, lr, momentum, wd float32) int { return 0 }
