//go:build amd64 && !purego

package kernels

// sgdF32 applies SGDStep's update without momentum to the first n elements; n is a multiple
// of 16.
//
//go:noescape
func sgdF32(param, grad *float32, n int, lr, wd float32)

// sgdMomentumF32 applies SGDStep's update with momentum to the first n elements; n is a
// multiple of 8.
//
//go:noescape
func sgdMomentumF32(param, grad, velocity *float32, n int, lr, momentum, wd float32)

// sgdVector updates the longest prefix it can with SIMD and returns how many elements it did.
// param, grad and velocity (when momentum is not 0) have equal lengths.
func sgdVector(param, grad, velocity []float32, lr, momentum, wd float32) int {
	if momentum == 0 {
		n := len(param) &^ 15
		if n > 0 {
			sgdF32(&param[0], &grad[0], n, lr, wd)
		}
		return n
	}
	n := len(param) &^ 7
	if n > 0 {
		sgdMomentumF32(&param[0], &grad[0], &velocity[0], n, lr, momentum, wd)
	}
	return n
}
