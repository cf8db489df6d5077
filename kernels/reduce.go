package kernels

// Element-wise reduction loops used by the collectives (collective.Comm reduces every received
// segment into the caller's buffer with these). They are generic over the four element types of
// the runtime; Go instantiates one body per type, so there is no interface call in the loop.
// All functions work on len(dst) elements and require len(src) >= len(dst). They never allocate.

// ReduceElem is the set of element types the reductions handle.
type ReduceElem interface {
	~float32 | ~float64 | ~int32 | ~int64
}

// ReduceAdd sets dst[i] += src[i]. Float32 and float64 slices go through SSE2 loops on amd64
// (64 bytes per iteration), which run at memory speed; other types and the tail use the Go loop.
func ReduceAdd[T ReduceElem](dst, src []T) {
	src = src[:len(dst)]
	i := addVector(dst, src)
	for ; i+4 <= len(dst); i += 4 {
		d := dst[i : i+4 : i+4]
		s := src[i : i+4 : i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// ReduceProd sets dst[i] *= src[i].
func ReduceProd[T ReduceElem](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d := dst[i : i+4 : i+4]
		s := src[i : i+4 : i+4]
		d[0] *= s[0]
		d[1] *= s[1]
		d[2] *= s[2]
		d[3] *= s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] *= src[i]
	}
}

// ReduceMin sets dst[i] = min(dst[i], src[i]). For floats a NaN in either operand wins, as
// with Go's built-in min, so every rank sees the same result whatever the reduction order.
func ReduceMin[T ReduceElem](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = min(dst[i], src[i])
	}
}

// ReduceMax sets dst[i] = max(dst[i], src[i]) (NaN wins, as with ReduceMin).
func ReduceMax[T ReduceElem](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = max(dst[i], src[i])
	}
}

// ReduceScale sets dst[i] *= s. Averages of floating-point data use it with s = 1/p.
func ReduceScale[T ~float32 | ~float64](dst []T, s T) {
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d := dst[i : i+4 : i+4]
		d[0] *= s
		d[1] *= s
		d[2] *= s
		d[3] *= s
	}
	for ; i < len(dst); i++ {
		dst[i] *= s
	}
}

// ReduceDiv sets dst[i] /= d with Go's integer division (truncation toward zero). Averages of
// integer data use it with d = p. It panics when d is 0, like the division it performs; callers
// pass the rank count, which is never 0.
func ReduceDiv[T ~int32 | ~int64](dst []T, d T) {
	for i := range dst {
		dst[i] /= d
	}
}
