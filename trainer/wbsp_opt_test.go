package trainer

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// TestWBSPOptUploadsEveryDelta runs WBSP-optimized end to end (immediate server rule, so the
// server's final model is the initial one plus the mean of every upload) and checks that each
// worker uploaded exactly the sum of the deltas it computed and that the servers hold them all.
func TestWBSPOptUploadsEveryDelta(t *testing.T) {
	for _, servers := range []int{1, 3} {
		t.Run("servers"+string(rune('0'+servers)), func(t *testing.T) {
			const size = 4
			cfg := Config{Strategy: "wbsp-opt", Collective: "ps", Batch: 8, LR: 0.1, MaxRounds: 50, Seed: 11, Eval: EvalEvery{Rounds: 10},
				Options:   &WBSPOptions{PSPlacement: PSPlacement{PSServers: servers}, Apply: "immediate"},
				StepSleep: []time.Duration{0, time.Millisecond, 0, 300 * time.Microsecond}}
			cfg.Defaults()
			if err := Builtin().Validate(&cfg, size); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			train := newSynthSet(1200, 1)
			eps := transport.NewMemJob(size)
			computed := make([][]float64, size)
			uploaded := make([][]float64, size)
			strats := make([]*wbspOpt, size)
			inits := make([][]float32, size)
			runRanks(t, eps, cancel, func(r int, ep transport.Endpoint) error {
				w, err := newBatchWorker(&cfg, ep, nil, newSynthModel(cfg.Seed), &synthBatches{set: train.shard(r, size), batch: cfg.Batch})
				if err != nil {
					return err
				}
				n := len(w.Params)
				inits[r] = append([]float32(nil), w.Params...)
				computed[r], uploaded[r] = make([]float64, n), make([]float64, n)
				s := &wbspOpt{onDelta: func(up bool, d []float32) {
					dst := computed[r]
					if up {
						dst = uploaded[r]
					}
					for i, v := range d {
						dst[i] += float64(v)
					}
				}}
				strats[r] = s
				_, err = Run(ctx, w, s, TrainOptions{TrainSize: len(train.y)})
				return err
			})
			n := len(inits[0])
			total := make([]float64, n)
			for r := range computed {
				for i := range total {
					if d := math.Abs(uploaded[r][i] - computed[r][i]); d > 1e-5*(1+math.Abs(computed[r][i])) {
						t.Fatalf("rank %d: uploaded Σ[%d] = %v, computed %v", r, i, uploaded[r][i], computed[r][i])
					}
					total[i] += computed[r][i]
				}
			}
			final := make([]float32, n)
			for r := 0; r < max(1, servers); r++ {
				lo, hi := strats[r].svc.ShardRange(r)
				if _, ok := strats[r].svc.Snapshot(final[lo:hi]); !ok {
					t.Fatalf("rank %d hosts no shard", r)
				}
			}
			for i := range final {
				want := float64(inits[0][i]) + total[i]/size
				if d := math.Abs(float64(final[i]) - want); d > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("server w[%d] = %v, initial + mean of computed deltas = %v", i, final[i], want)
				}
			}
		})
	}
}
