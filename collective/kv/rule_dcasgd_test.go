package kv

import (
	"fmt"
	"math"
	"testing"
)

// TestDCASGDMatchesReference drives workers in a fixed order, some pulling every step and
// some rarely, so that backups lag; the servers' model must match the rule computed here for
// both the paper's per-worker backups and MXNet's shared previous_weight.
func TestDCASGDMatchesReference(t *testing.T) {
	cases := []struct {
		size    int
		servers []int
		n       int
		shared  bool
	}{
		{1, nil, 5, false}, {2, nil, 13, false}, {3, []int{0, 2}, 17, false}, {4, []int{0, 1, 2, 3}, 9, false},
		{1, nil, 5, true}, {2, nil, 13, true}, {3, []int{0, 2}, 17, true}, {5, []int{4, 1}, 31, true},
	}
	const lr, lam, scale = 0.05, 0.5, 2
	for _, tc := range cases {
		t.Run(fmt.Sprintf("p%d_servers%v_n%d_shared%v", tc.size, tc.servers, tc.n, tc.shared), func(t *testing.T) {
			ctx := testCtx(t)
			w0 := initVec(tc.n)
			rule := DCASGD{LR: lr, Lambda: lam, Scale: scale, Shared: tc.shared}
			svcs := startJob(t, ctx, tc.size, Config{Len: tc.n, Servers: tc.servers, Init: w0, Rule: rule.Factory()})
			ref := append([]float32(nil), w0...)
			bak := make([][]float32, tc.size) // per worker (paper)
			for r := range bak {
				bak[r] = append([]float32(nil), w0...)
			}
			prev := append([]float32(nil), w0...) // shared (MXNet)
			got := make([]float32, tc.n)
			for k := 0; k < 4; k++ {
				for r, s := range svcs {
					g := grad(tc.n, r, k)
					b := bak[r]
					if tc.shared {
						b = prev
					}
					for i := range ref {
						gi := float32(scale) * g[i]
						wi := ref[i]
						step := float32(lr) * (gi + float32(lam)*gi*gi*(wi-b[i]))
						if tc.shared {
							prev[i] = wi
						}
						ref[i] = wi - step
					}
					pull := r%2 == 0 || k == 2 // odd ranks pull only at step 2
					var err error
					if pull {
						_, err = s.PushPull(ctx, g, got, uint64(k+1), false)
						copy(bak[r], ref)
					} else {
						_, err = s.Push(ctx, g, uint64(k+1), false)
					}
					if err != nil {
						t.Fatalf("rank %d step %d: %v", r, k, err)
					}
					if !pull {
						continue
					}
					for i := range ref {
						if d := math.Abs(float64(got[i] - ref[i])); d > 1e-5*(1+math.Abs(float64(ref[i]))) {
							t.Fatalf("rank %d step %d: w[%d] = %v, reference %v", r, k, i, got[i], ref[i])
						}
					}
				}
			}
			closeJob(t, ctx, svcs)
		})
	}
}

// TestDCASGDCompensates checks the sign of the correction on one value: with w above the
// worker's backup and g > 0, the step is larger than plain SGD's; with λ = 0 it is SGD's.
func TestDCASGDCompensates(t *testing.T) {
	cases := []struct {
		lambda   float32
		wantStep float32
	}{
		{0, 0.1 * 2},               // lr·g
		{0.5, 0.1 * (2 + 0.5*4*1)}, // lr·(g + λ·g²·(w − bak)), w − bak = 1
	}
	for _, tc := range cases {
		f := DCASGD{LR: 0.1, Lambda: tc.lambda}.Factory()
		sh := &Shard{W: []float32{0}, Workers: 2}
		r, err := f(sh)
		if err != nil {
			t.Fatal(err)
		}
		sh.W[0] = 1 // another worker moved w since worker 0's backup (0)
		if _, err := r.Push(sh, Push{Worker: 0, G: []float32{2}}); err != nil {
			t.Fatal(err)
		}
		if step := 1 - sh.W[0]; math.Abs(float64(step-tc.wantStep)) > 1e-6 {
			t.Errorf("λ=%v: step %v, want %v", tc.lambda, step, tc.wantStep)
		}
	}
}

func TestRuleValidation(t *testing.T) {
	cases := []struct {
		name string
		f    RuleFactory
	}{
		{"dcasgd lr", DCASGD{LR: 0, Lambda: 0.04}.Factory()},
		{"dcasgd lambda", DCASGD{LR: 0.1, Lambda: float32(math.NaN())}.Factory()},
		{"dcasgd scale", DCASGD{LR: 0.1, Scale: -1}.Factory()},
		{"delta scale", Delta{Scale: -1}.Factory()},
		{"wbsp slow rank", WBSP{PinSlow: true, SlowRank: -1}.Factory()},
		{"wbsp slow rank range", WBSP{PinSlow: true, SlowRank: 3}.Factory()},
		{"wbsp alpha", WBSP{Alpha: 2}.Factory()},
	}
	for _, tc := range cases {
		if _, err := tc.f(&Shard{W: make([]float32, 3), Workers: 3}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
