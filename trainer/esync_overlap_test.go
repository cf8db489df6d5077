package trainer

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// overlapConfig is ESync with overlapping rounds on the synthetic workload.
func overlapConfig(rounds int) Config {
	return Config{Strategy: "esync", Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: rounds, Seed: 3,
		Options: &ESyncConfig{Overlap: true}}
}

// Overlapping rounds keep every rank's global model identical on 1 to 5 ranks, with and
// without the outer optimizer and int8 rounds: the job ends with the models equal bit for bit.
func TestESyncOverlapKeepsReplicasIdentical(t *testing.T) {
	for _, v := range []struct{ outer, compress string }{{"", ""}, {OuterNesterov, ""}, {"", "int8"}, {OuterNesterov, "int8"}} {
		for size := 1; size <= 5; size++ {
			cfg := overlapConfig(5)
			cfg.Outer, cfg.Compress = v.outer, v.compress
			out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
			if out.err != nil {
				t.Fatalf("--outer %q --compress %q on %d ranks: %v", v.outer, v.compress, size, out.err)
			}
			for r := 1; r < size; r++ {
				if !slices.Equal(out.params[r], out.params[0]) {
					t.Fatalf("--outer %q --compress %q on %d ranks: rank %d's model differs from rank 0's", v.outer, v.compress, size, r)
				}
			}
		}
	}
	// With the paper's non-blocking queries too, whose steps overlap the state service's
	// answers as the rounds overlap their exchanges.
	cfg := overlapConfig(5)
	cfg.Outer, cfg.Options = OuterNesterov, &ESyncConfig{Overlap: true, Queries: ESyncNonBlocking}
	out := runCkptJob(t, ckptJob{cfg: cfg, size: 3, cancelAt: -1})
	if out.err != nil {
		t.Fatalf("--esync-queries nonblocking: %v", out.err)
	}
	for r := 1; r < 3; r++ {
		if !slices.Equal(out.params[r], out.params[0]) {
			t.Fatalf("--esync-queries nonblocking: rank %d's model differs from rank 0's", r)
		}
	}
}

// The steps a rank takes while its round's exchange is in flight are kept: on one rank, where
// every round is one step, ESync with overlap and the plain update (γ = 1) applies every
// local step once, so it ends where plain SGD over the same batches ends, up to float32's
// rounding of the re-basing. Dropping the in-flight steps would lose every other step.
func TestESyncOverlapKeepsEveryStep(t *testing.T) {
	cfg := overlapConfig(12)
	cfg.Momentum = 0
	overlap := runCkptJob(t, ckptJob{cfg: cfg, size: 1, cancelAt: -1})
	if overlap.err != nil {
		t.Fatal(overlap.err)
	}
	steps := 0
	for _, rec := range overlap.records {
		steps += rec.LocalSteps
	}
	if steps != 13 {
		t.Fatalf("--max-rounds 12 with overlap took %d steps, want 13 (12 rounds and the one that flushes)", steps)
	}
	requireStepsOfSGD(t, cfg, steps, overlap.params[0], "with overlap")
}

// requireStepsOfSGD fails t unless got, a one-rank ESync model under cfg after steps local
// steps, is plain SGD's over as many steps of the same batches (ESync without overlap, one
// step a round on one rank), up to float32's rounding of the re-basing.
func requireStepsOfSGD(t *testing.T, cfg Config, steps int, got []float32, what string) {
	t.Helper()
	plain := cfg
	plain.Options, plain.MaxRounds = &ESyncConfig{}, steps
	sgd := runCkptJob(t, ckptJob{cfg: plain, size: 1, cancelAt: -1})
	if sgd.err != nil {
		t.Fatal(sgd.err)
	}
	worst, scale := 0.0, 0.0
	for i, v := range sgd.params[0] {
		worst = max(worst, math.Abs(float64(got[i]-v)))
		scale = max(scale, math.Abs(float64(v)))
	}
	if worst > 1e-5*scale {
		t.Fatalf("%s over %d steps the model is off plain SGD's by %g (largest weight %g): steps were lost or applied twice", what, steps, worst, scale)
	}
}

// A run with overlapping rounds resumed from its checkpoint ends bitwise where the run that
// wrote the checkpoint ends: a checkpoint applies the exchange in flight first, and saves the
// global model and the outer state.
func TestESyncOverlapResumeIsBitwise(t *testing.T) {
	cfg := overlapConfig(16)
	cfg.Outer = OuterNesterov
	every := EvalEvery{Rounds: 4}
	whole := runCkptJob(t, ckptJob{cfg: cfg, size: 1, cancelAt: -1, opts: CheckpointOptions{Dir: t.TempDir(), Every: every}})
	if whole.err != nil {
		t.Fatal(whole.err)
	}
	dir := t.TempDir()
	if killed := runCkptJob(t, ckptJob{cfg: cfg, size: 1, cancelAt: 9, opts: CheckpointOptions{Dir: dir, Every: every}}); killed.err == nil {
		t.Fatal("the killed job did not fail")
	}
	resumed := runCkptJob(t, ckptJob{cfg: cfg, size: 1, cancelAt: -1, resume: dir, opts: CheckpointOptions{Dir: dir, Every: every}})
	if resumed.err != nil {
		t.Fatal(resumed.err)
	}
	if !slices.Equal(resumed.params[0], whole.params[0]) {
		t.Fatal("the resumed model differs from the uninterrupted one")
	}
}

// --esync-overlap is a flag of esync's, off by default, recorded in its options (config.json)
// and accepted with --outer and --compress.
func TestESyncOverlapFlag(t *testing.T) {
	for _, given := range []bool{false, true} {
		requireESyncFlag(t, nil, "esync-overlap", given, func(o *ESyncConfig) bool { return o.Overlap })
	}
}

// requireESyncFlag fails t unless esync's boolean --flag, given or not after the flags
// before (and --outer nesterov --compress int8), validates and is recorded in the options'
// JSON (config.json) as get reads it.
func requireESyncFlag(t *testing.T, before [][2]string, flag string, given bool, get func(*ESyncConfig) bool) {
	t.Helper()
	flags := append([][2]string{{"sync", "esync"}, {"outer", "nesterov"}, {"compress", "int8"}, {"collective", "ring"}}, before...)
	if given {
		flags = append(flags, [2]string{flag, "true"})
	}
	cfg, err := ConfigFromFlags(Builtin(), flags)
	if err != nil {
		t.Fatal(err)
	}
	if err := Builtin().Validate(&cfg, 4); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	key := `"` + strings.TrimPrefix(flag, "esync-") + `":true`
	if get(cfg.Options.(*ESyncConfig)) != given || strings.Contains(string(b), key) != given {
		t.Fatalf("--%s given %v: options %s", flag, given, b)
	}
}

// Local SGD (wbsp-opt with a period) sends its overlapped rounds compressed and keeps the
// replicas identical on 1 to 5 ranks; over the parameter server, which has no allreduce to
// compress, --compress is refused.
func TestWBSPOptCompressedRounds(t *testing.T) {
	for size := 1; size <= 5; size++ {
		cfg := Config{Strategy: "wbsp-opt", Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 5, Seed: 3,
			Compress: "int8", Options: &WBSPOptions{Period: 2}}
		out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
		if out.err != nil {
			t.Fatalf("%d ranks: %v", size, out.err)
		}
		for r := 1; r < size; r++ {
			if !slices.Equal(out.params[r], out.params[0]) {
				t.Fatalf("%d ranks: rank %d's model differs from rank 0's", size, r)
			}
		}
	}
	cfg := Config{Strategy: "wbsp-opt", Collective: "ps", Compress: "int8"}
	cfg.Defaults()
	err := Builtin().Validate(&cfg, 2)
	if err == nil || !strings.Contains(err.Error(), "wbsp-opt over Config.Collective ps sends no compressed rounds") {
		t.Fatalf("wbsp-opt over ps with --compress int8: %v", err)
	}
}

// A fast rank that is READY and hands its round over before a slow rank has reported its
// first step does not strand the slow rank in the round it left: the slow rank, now the
// slowest, still in round 1 while the fast one has reset into round 2, is READY at its
// query, and the job ends. Rank 0's first step (2 ms) is the slowest reported when it asks,
// so it is READY at once; rank 1's first step takes 60 ms, so its query comes long after rank
// 0's reset. The state service used to judge rank 1's round-1 query against round 2, whose
// slowest (rank 1) had not reset into it: NOT-READY for ever, for both ranks, a hang (the
// thin-link run of 8 ranks on 4 hosts stopped so after its first round).
func TestESyncOverlapSlowRankCatchesUp(t *testing.T) {
	for _, queries := range []string{ESyncBlocking, ESyncNonBlocking} {
		cfg := overlapConfig(4)
		cfg.Options = &ESyncConfig{Overlap: true, Queries: queries}
		cfg.Slowdown, cfg.SlowdownBase = []float64{1, 30, 1}, 2*time.Millisecond
		out := runCkptJob(t, ckptJob{cfg: cfg, size: 3, cancelAt: -1, timeout: 20 * time.Second})
		if out.err != nil {
			t.Fatalf("--esync-queries %s, a rank 30× slower than the others: %v", queries, out.err)
		}
		for r := 1; r < 3; r++ {
			if !slices.Equal(out.params[r], out.params[0]) {
				t.Fatalf("--esync-queries %s: rank %d's model differs from rank 0's", queries, r)
			}
		}
	}
}
