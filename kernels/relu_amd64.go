//go:build amd64 && !purego

package kernels

// reluF32 is ReLU's loop over n elements, n a multiple of 16.
//
//go:noescape
func reluF32(y, x *float32, n int)

// reluBackwardF32 is ReLUBackward's loop over n elements, n a multiple of 16.
//
//go:noescape
func reluBackwardF32(dx, dy, y *float32, n int)

// reluVector does the longest prefix of ReLU it can with SIMD and returns its length; y and x
// have equal lengths.
func reluVector(y, x []float32) int {
	n := len(y) &^ 15
	if n > 0 {
		reluF32(&y[0], &x[0], n)
	}
	return n
}

// reluBackwardVector is reluVector for ReLUBackward.
func reluBackwardVector(dx, dy, y []float32) int {
	n := len(dx) &^ 15
	if n > 0 {
		reluBackwardF32(&dx[0], &dy[0], &y[0], n)
	}
	return n
}
