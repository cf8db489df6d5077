package kernels

import (
	"math"
	"testing"
)

func TestReduceKernels(t *testing.T) {
	// Lengths around the 4-way unroll boundary.
	for _, n := range []int{0, 1, 3, 4, 5, 8, 13, 1009} {
		a := make([]float64, n)
		b := make([]float64, n)
		for i := range a {
			a[i] = float64(i%7) - 3
			b[i] = float64(i%5) - 1.5
		}
		tests := []struct {
			name string
			run  func(dst, src []float64)
			want func(x, y float64) float64
		}{
			{"add", ReduceAdd[float64], func(x, y float64) float64 { return x + y }},
			{"prod", ReduceProd[float64], func(x, y float64) float64 { return x * y }},
			{"min", ReduceMin[float64], math.Min},
			{"max", ReduceMax[float64], math.Max},
		}
		for _, tc := range tests {
			dst := append([]float64(nil), a...)
			tc.run(dst, b)
			for i := range dst {
				if w := tc.want(a[i], b[i]); dst[i] != w {
					t.Fatalf("%s n=%d: dst[%d] = %v, want %v", tc.name, n, i, dst[i], w)
				}
			}
		}
	}
}

func TestReduceIntegerTypes(t *testing.T) {
	tests := []struct {
		name string
		run  func() []int64
		want []int64
	}{
		{"add int32", func() []int64 {
			d := []int32{1, -2, 3, 4, 5}
			ReduceAdd(d, []int32{10, 20, 30, 40, 50})
			return widen(d)
		}, []int64{11, 18, 33, 44, 55}},
		{"prod int64", func() []int64 {
			d := []int64{1, -2, 3, 4, 5}
			ReduceProd(d, []int64{2, 2, 2, 2, -1})
			return d
		}, []int64{2, -4, 6, 8, -5}},
		{"min int32", func() []int64 {
			d := []int32{1, -2, 3}
			ReduceMin(d, []int32{0, 0, 0})
			return widen(d)
		}, []int64{0, -2, 0}},
		{"max int64", func() []int64 {
			d := []int64{1, -2, 3}
			ReduceMax(d, []int64{0, 0, 0})
			return d
		}, []int64{1, 0, 3}},
		{"div truncates toward zero", func() []int64 {
			d := []int32{7, -7, 6, -1, 0}
			ReduceDiv(d, 2)
			return widen(d)
		}, []int64{3, -3, 3, 0, 0}},
	}
	for _, tc := range tests {
		got := tc.run()
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func TestReduceScaleFloat32(t *testing.T) {
	d := []float32{1, 2, 3, 4, 5, 6, 7}
	ReduceScale(d, 0.5)
	for i, v := range d {
		if v != float32(i+1)*0.5 {
			t.Fatalf("d[%d] = %v, want %v", i, v, float32(i+1)*0.5)
		}
	}
}

func TestReduceMinMaxNaN(t *testing.T) {
	nan := float32(math.NaN())
	d := []float32{1, nan}
	ReduceMin(d, []float32{nan, 1})
	if !math.IsNaN(float64(d[0])) || !math.IsNaN(float64(d[1])) {
		t.Fatalf("min with NaN = %v, want NaN in both", d)
	}
}

func widen(x []int32) []int64 {
	out := make([]int64, len(x))
	for i, v := range x {
		out[i] = int64(v)
	}
	return out
}

func BenchmarkReduceAddF32(b *testing.B) {
	const n = 1 << 18
	dst := make([]float32, n)
	src := make([]float32, n)
	b.SetBytes(4 * n)
	for b.Loop() {
		ReduceAdd(dst, src)
	}
}

// TestReduceAddVectorTails checks the SIMD add against the scalar sum for lengths around its
// 16- and 8-element blocks, at offsets that leave the slices unaligned.
func TestReduceAddVectorTails(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1031} {
		for _, off := range []int{0, 1, 3} {
			a32 := make([]float32, n+off)
			b32 := make([]float32, n+off)
			a64 := make([]float64, n+off)
			b64 := make([]float64, n+off)
			for i := range a32 {
				a32[i], b32[i] = float32(i%11)-5, float32(i%13)*0.5
				a64[i], b64[i] = float64(i%11)-5, float64(i%13)*0.25
			}
			d32 := append([]float32(nil), a32[off:]...)
			d64 := append([]float64(nil), a64[off:]...)
			ReduceAdd(d32, b32[off:])
			ReduceAdd(d64, b64[off:])
			for i := 0; i < n; i++ {
				if w := a32[off+i] + b32[off+i]; d32[i] != w {
					t.Fatalf("float32 n=%d off=%d: dst[%d] = %v, want %v", n, off, i, d32[i], w)
				}
				if w := a64[off+i] + b64[off+i]; d64[i] != w {
					t.Fatalf("float64 n=%d off=%d: dst[%d] = %v, want %v", n, off, i, d64[i], w)
				}
			}
		}
	}
}
