//go:build amd64 && !purego

package kernels

// addF32 sets dst[i] += src[i] for i < n; n is a multiple of 16.
//
//go:noescape
func addF32(dst, src *float32, n int)

// addF64 sets dst[i] += src[i] for i < n; n is a multiple of 8.
//
//go:noescape
func addF64(dst, src *float64, n int)

// addVector adds the longest prefix it can with SIMD and returns how many elements it did.
// Only the plain float32 and float64 slices go this way; other types return 0.
func addVector[T ReduceElem](dst, src []T) int {
	switch d := any(dst).(type) {
	case []float32:
		s := any(src).([]float32)
		n := len(d) &^ 15
		if n > 0 {
			addF32(&d[0], &s[0], n)
		}
		return n
	case []float64:
		s := any(src).([]float64)
		n := len(d) &^ 7
		if n > 0 {
			addF64(&d[0], &s[0], n)
		}
		return n
	}
	return 0
}
