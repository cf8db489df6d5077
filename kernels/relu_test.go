package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestReLUBitwise: ReLU and ReLUBackward (SIMD bulk plus Go tail) equal their element-by-element
// definitions bit for bit, at lengths around the vector width, on values that include both
// zeros, both infinities, NaNs of both signs and subnormals.
func TestReLUBitwise(t *testing.T) {
	d, _ := NewCPU(1)
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), -float32(math.NaN()), 1e-45, -1e-45, 1, -1}
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 100, 1031} {
		x, dy := randSlice(r, n), randSlice(r, n)
		for i := range x {
			if r.IntN(3) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
		}
		xt, dyt := tensor(t, d, x), tensor(t, d, dy)
		yt, dxt := tensor(t, d, make([]float32, n)), tensor(t, d, make([]float32, n))
		d.ReLU(yt, xt)
		d.ReLUBackward(dxt, dyt, xt)
		y, dx := host(t, d, yt), host(t, d, dxt)
		for i, v := range x {
			b := math.Float32bits(v)
			wantY := b
			if b>>31 == 1 {
				wantY = 0
			}
			wantDx := uint32(0)
			if int32(b) > 0 {
				wantDx = math.Float32bits(dy[i])
			}
			if math.Float32bits(y[i]) != wantY || math.Float32bits(dx[i]) != wantDx {
				t.Fatalf("n=%d: x[%d] = %v (%#x): relu %#x, want %#x; backward %#x, want %#x",
					n, i, v, b, math.Float32bits(y[i]), wantY, math.Float32bits(dx[i]), wantDx)
			}
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}
