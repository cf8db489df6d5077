package cuda

import (
	"math/rand/v2"
	"testing"
)

// refColMajor is the BLAS definition of SGEMM in column-major storage, with cuBLAS's
// argument rules; it returns false where cuBLAS would report CUBLAS_STATUS_INVALID_VALUE.
func refColMajor(g colMajorGemm, alpha float32, a, b []float32, beta float32, c []float32) bool {
	rowsA, rowsB := g.m, g.k
	if g.transA {
		rowsA = g.k
	}
	if g.transB {
		rowsB = g.n
	}
	if g.m < 0 || g.n < 0 || g.k < 0 || g.lda < max(1, rowsA) || g.ldb < max(1, rowsB) || g.ldc < max(1, g.m) {
		return false
	}
	for j := 0; j < g.n; j++ {
		for i := 0; i < g.m; i++ {
			var acc float32
			for p := 0; p < g.k; p++ {
				ai, bi := i+p*g.lda, p+j*g.ldb
				if g.transA {
					ai = p + i*g.lda
				}
				if g.transB {
					bi = j + p*g.ldb
				}
				av, bv := a[ai], b[bi]
				acc += av * bv
			}
			if beta == 0 {
				c[i+j*g.ldc] = alpha * acc
			} else {
				c[i+j*g.ldc] = alpha*acc + beta*c[i+j*g.ldc]
			}
		}
	}
	return true
}

// TestRowMajorGemmMapping checks the row-major → cuBLAS mapping against the row-major
// definition for every transpose combination and for empty and degenerate shapes.
func TestRowMajorGemmMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {2, 3, 4}, {5, 1, 7}, {1, 6, 2}, {4, 4, 0}, {3, 5, 1}, {0, 3, 2}, {3, 0, 2}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			transA, transB := tr[0], tr[1]
			a, b := randSlice(rng, m*k), randSlice(rng, k*n)
			c0 := randSlice(rng, m*n)
			const alpha, beta = 1.5, 0.5
			want := append([]float32(nil), c0...)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var acc float32
					for p := 0; p < k; p++ {
						ai, bi := i*k+p, p*n+j
						if transA {
							ai = p*m + i
						}
						if transB {
							bi = j*k + p
						}
						av, bv := a[ai], b[bi]
						acc += av * bv
					}
					want[i*n+j] = alpha*acc + beta*want[i*n+j]
				}
			}
			got := append([]float32(nil), c0...)
			g := rowMajorGemm(transA, transB, m, n, k)
			if !refColMajor(g, alpha, b, a, beta, got) {
				t.Fatalf("m=%d n=%d k=%d trans=%v: cuBLAS would reject %+v", m, n, k, tr, g)
			}
			for i := range want {
				if d := got[i] - want[i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("m=%d n=%d k=%d trans=%v: c[%d] = %v, want %v", m, n, k, tr, i, got[i], want[i])
				}
			}
		}
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}
