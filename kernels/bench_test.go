package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSgemm reports GFLOP/s for every available engine at the MLP's shapes (batch 64:
// forward X·Wᵀ, the weight gradient dYᵀ·X and the input gradient dY·W) and a square 1024, on
// one thread. GFLOP/cpu-s divides by the process's CPU time instead of the wall clock, which
// is the meaningful number on a host shared with other work.
func BenchmarkSgemm(b *testing.B) {
	shapes := []struct {
		name    string
		ta, tb  bool
		m, n, k int
	}{
		{"mlp-fc1-fwd", false, true, 64, 256, 784},
		{"mlp-fc1-dw", true, false, 256, 784, 64},
		{"mlp-fc2-fwd", false, true, 64, 128, 256},
		{"mlp-fc2-dx", false, false, 64, 256, 128},
		{"cnn-conv2-fwd", false, false, 64, 196, 800},
		{"square-1024", false, false, 1024, 1024, 1024},
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, e := range GEMMEngines() {
		d, err := NewCPUWith(CPUConfig{Threads: 1, GEMM: e})
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range shapes {
			b.Run(fmt.Sprintf("%s/%s", e, s.name), func(b *testing.B) {
				a := tensor(b, d, randSlice(r, s.m*s.k))
				bb := tensor(b, d, randSlice(r, s.k*s.n))
				c := tensor(b, d, make([]float32, s.m*s.n))
				d.Gemm(s.ta, s.tb, s.m, s.n, s.k, 1, a, bb, 0, c) // grow the workspaces
				cpu0 := processCPUTime()
				for b.Loop() {
					d.Gemm(s.ta, s.tb, s.m, s.n, s.k, 1, a, bb, 0, c)
				}
				cpu := processCPUTime() - cpu0
				if err := d.Sync(); err != nil {
					b.Fatal(err)
				}
				flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// GFLOP per CPU-second: what a core delivers while it runs this, on a shared host.
				if cpu > 0 {
					b.ReportMetric(flops/cpu.Seconds()/1e9, "GFLOP/cpu-s")
				}
			})
		}
	}
}
