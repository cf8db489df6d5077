package trainer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func intPtr(v int) *int { return &v }

// TestPSStrategiesConverge trains the synthetic problem with each parameter-server strategy
// and variant on 4 in-process ranks, odd ranks slowed down, and checks the final accuracy.
func TestPSStrategiesConverge(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"wbsp-buffered", Config{Strategy: "wbsp", Collective: "ps"}},
		{"wbsp-immediate-slow1", Config{Strategy: "wbsp", Collective: "ps", Options: &WBSPOptions{Apply: "immediate", SlowRank: intPtr(1)}}},
		{"wbsp-two-servers", Config{Strategy: "wbsp", Collective: "ps", Options: &WBSPOptions{PSPlacement: PSPlacement{PSServers: 2}}}},
		{"wbsp-opt", Config{Strategy: "wbsp-opt", Collective: "ps"}},
		{"wbsp-server-on-slow-rank3", Config{Strategy: "wbsp", Collective: "ps", Options: &WBSPOptions{PSPlacement: PSPlacement{PSRanks: []int{3}}}}},
		{"wbsp-opt-servers-ranks3-0", Config{Strategy: "wbsp-opt", Collective: "ps", Options: &WBSPOptions{PSPlacement: PSPlacement{PSRanks: []int{3, 0}}}}},
		{"wbsp-opt-immediate-servers4", Config{Strategy: "wbsp-opt", Collective: "ps", Options: &WBSPOptions{PSPlacement: PSPlacement{PSServers: 4}, Apply: "immediate"}}},
		{"dcasgd-paper", Config{Strategy: "dcasgd"}},
		{"dcasgd-mxnet-servers3", Config{Strategy: "dcasgd", Options: &DCASGDOptions{PSPlacement: PSPlacement{PSServers: 3}, Variant: "mxnet", Lambda: 0.5}}},
		{"ssp-every-s2", Config{Strategy: "ssp", Options: &SSPOptions{Staleness: intPtr(2)}}},
		{"ssp-every-s0", Config{Strategy: "ssp", Options: &SSPOptions{PSPlacement: PSPlacement{PSServers: 2}, Staleness: intPtr(0)}}},
		{"ssp-lazy-s3", Config{Strategy: "ssp", Options: &SSPOptions{Staleness: intPtr(3), Pull: "lazy"}}},
		{"ssp-every-s2-server-rank1", Config{Strategy: "ssp", Options: &SSPOptions{PSPlacement: PSPlacement{PSRanks: []int{1}}, Staleness: intPtr(2)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Batch, cfg.LR, cfg.MaxRounds, cfg.Seed, cfg.Eval = 8, 0.1, 60, 5, EvalEvery{Rounds: 15}
			cfg.StepSleep = []time.Duration{0, time.Millisecond, 0, time.Millisecond}
			out := runSynthJob(t, cfg, 4)
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85", acc)
			}
			steps := 0
			for _, res := range out.results {
				steps += len(res.Records)
			}
			// Rank 0 votes once the servers' clock sum says 59 rounds are done and its own
			// round makes the 60th; every other rank then takes at most one more step.
			if steps < 4*59 {
				t.Errorf("%d steps in all, want ≥ %d (about 60 rounds of one step per rank)", steps, 4*59)
			}
		})
	}
}

// TestPSStrategiesStopOnTarget checks that rank 0's stop reaches every rank and no rank is
// left blocked (on the SSP gate in particular) for each strategy.
func TestPSStrategiesStopOnTarget(t *testing.T) {
	for _, tc := range []struct{ strat, coll string }{
		{"wbsp", "ps"}, {"wbsp-opt", "ps"}, {"wbsp", "ring"}, {"wbsp-opt", "butterfly"}, {"dcasgd", ""}, {"ssp", ""},
	} {
		strat := tc.strat
		t.Run(strat+"-"+tc.coll, func(t *testing.T) {
			cfg := Config{Strategy: strat, Collective: tc.coll, Batch: 8, LR: 0.1, TargetAcc: 0.8, MaxRounds: 100000, Seed: 9,
				Eval: EvalEvery{Rounds: 1}, StepSleep: []time.Duration{0, 2 * time.Millisecond, 0}}
			if strat == "ssp" {
				cfg.Options = &SSPOptions{Staleness: intPtr(1)}
			}
			out := runSynthJob(t, cfg, 3)
			if res := out.results[0]; !strings.Contains(res.StopReason, "target accuracy") {
				t.Fatalf("stop reason %q, want the target accuracy", res.StopReason)
			}
		})
	}
}

// TestDeltaPipelineLosesNothing drives WBSP-optimized's double buffer the way Round does,
// against a scripted server, with integer deltas so that every sum is exact: whatever the
// timing of uploads and new global models, every computed delta is uploaded exactly once, and
// a worker's model is always the last global model it took plus its deltas not in it.
func TestDeltaPipelineLosesNothing(t *testing.T) {
	const n, workers = 5, 3
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			server := make([]float32, n) // immediate rule, scale 1: Σ of every upload
			type worker struct {
				pipe               *deltaPipeline
				local              []float32
				busy               bool
				computed, uploaded []float32
				prev, delta        []float32 // as in wbspOpt
				base               []float32 // the global model last taken
				sinceBase          []float32 // deltas computed since base, not in it
			}
			ws := make([]*worker, workers)
			for i := range ws {
				ws[i] = &worker{pipe: newDeltaPipeline(n), local: make([]float32, n), computed: make([]float32, n),
					uploaded: make([]float32, n), base: make([]float32, n), sinceBase: make([]float32, n),
					prev: make([]float32, n), delta: make([]float32, n)}
			}
			addTo := func(dst, x []float32) {
				for i := range dst {
					dst[i] += x[i]
				}
			}
			// landed[i]: worker i's upload has reached the server (it is applied there when it
			// lands; the worker takes the reply at a later boundary). fresh[i]: the reply
			// carries a new global model.
			landed := make([]bool, workers)
			fresh := make([]bool, workers)
			for ev := 0; ev < 400; ev++ {
				i := rng.IntN(workers)
				w := ws[i]
				switch {
				case w.busy && !landed[i] && rng.IntN(2) == 0:
					// The upload lands on the server while the worker computes.
					addTo(server, w.pipe.inflight)
					landed[i] = true
					fresh[i] = rng.IntN(3) == 0 // a trigger published: the reply carries w
					if fresh[i] {
						copy(w.pipe.global, server)
					}
				default:
					// A step boundary: a local step, then Round's upload logic.
					d := make([]float32, n)
					for k := range d {
						d[k] = float32(rng.IntN(9) - 4)
					}
					addTo(w.local, d)
					addTo(w.computed, d)
					addTo(w.sinceBase, d)
					if i == 0 { // worker 0 runs the production path, which skips the delta
						w.pipe.addStep(nil, w.local, w.prev)
					} else {
						w.pipe.addStep(w.delta, w.local, w.prev)
						for k := range d {
							if w.delta[k] != d[k] {
								t.Fatalf("event %d: worker %d: step delta %v, want %v", ev, i, w.delta, d)
							}
						}
					}
					for k := range d {
						if w.prev[k] != w.local[k] {
							t.Fatalf("event %d: worker %d: prev %v is not the model %v", ev, i, w.prev, w.local)
						}
					}
					if w.busy && landed[i] && rng.IntN(2) == 0 { // the reply is in
						w.busy = false
						if fresh[i] {
							w.pipe.rebase(w.local, 0, n)
							copy(w.prev, w.local)
							copy(w.base, w.pipe.global)
							copy(w.sinceBase, w.pipe.pending)
							if w.pipe.empty {
								clear(w.sinceBase)
							}
						}
					}
					if !w.busy {
						up := w.pipe.handoff()
						addTo(w.uploaded, up)
						w.busy, landed[i], fresh[i] = true, false, false
					}
				}
				for k := range w.local {
					if w.local[k] != w.base[k]+w.sinceBase[k] {
						t.Fatalf("event %d: worker %d's model %v is not its global %v plus its deltas %v", ev, i, w.local, w.base, w.sinceBase)
					}
				}
			}
			// The end: every in-flight upload lands, then each worker flushes what is pending.
			for i, w := range ws {
				if w.busy && !landed[i] {
					addTo(server, w.pipe.inflight)
				}
				up := w.pipe.handoff()
				addTo(w.uploaded, up)
				addTo(server, up)
			}
			total := make([]float32, n)
			for i, w := range ws {
				for k := range w.computed {
					if w.uploaded[k] != w.computed[k] {
						t.Fatalf("worker %d: uploaded %v, computed %v", i, w.uploaded, w.computed)
					}
				}
				addTo(total, w.computed)
			}
			for k := range total {
				if server[k] != total[k] {
					t.Fatalf("server holds %v, the workers computed %v in all", server, total)
				}
			}
		})
	}
}
