package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSGDStepBitwise: SGDStep (SIMD bulk plus Go tail) equals the element-by-element
// definition bit for bit, at lengths around every vector width, with and without momentum and
// weight decay.
func TestSGDStepBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 1031} {
		for _, c := range []struct{ lr, mom, wd float32 }{{0.1, 0, 0}, {0.01, 0, 1e-3}, {0.05, 0.9, 0}, {0.05, 0.9, 5e-4}} {
			p, g, v := randSlice(r, n), randSlice(r, n), randSlice(r, n)
			if n > 2 {
				p[1], g[2] = 0, float32(math.Copysign(0, -1))
			}
			wantP, wantV := append([]float32(nil), p...), append([]float32(nil), v...)
			for i := range wantP {
				gi := g[i] + float32(c.wd*wantP[i])
				if c.mom != 0 {
					wantV[i] = float32(c.mom*wantV[i]) + gi
					gi = wantV[i]
				}
				wantP[i] -= float32(c.lr * gi)
			}
			vel := v
			if c.mom == 0 {
				vel = nil
			}
			SGDStep(p, g, vel, c.lr, c.mom, c.wd)
			for i := range p {
				if math.Float32bits(p[i]) != math.Float32bits(wantP[i]) {
					t.Fatalf("n=%d %+v: param[%d] = %v, want %v", n, c, i, p[i], wantP[i])
				}
				if c.mom != 0 && math.Float32bits(v[i]) != math.Float32bits(wantV[i]) {
					t.Fatalf("n=%d %+v: velocity[%d] = %v, want %v", n, c, i, v[i], wantV[i])
				}
			}
		}
	}
}
