package trainer

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestESyncCheckpointKeepsTheErrorFeedback: an esync part saves the rank's error-feedback
// residual and a resumed rank continues with it bitwise; a part without one (a run without
// compression) resumes with a zero residual, and a residual is refused by a run without
// compression.
func TestESyncCheckpointKeepsTheErrorFeedback(t *testing.T) {
	const n = 1000
	w := &Worker{Params: make([]float32, n)}
	from := &CheckpointHeader{version: 2}
	strategy := func(compress string) *esync {
		r, err := newRoundReducer(&Config{Compress: compress}, n, esyncExtra)
		if err != nil {
			t.Fatal(err)
		}
		return &esync{reduce: r, pre: make([]float32, n), opt: &SGD{Momentum: 0.9}}
	}
	saved := strategy("int8")
	velocity := make([]float32, n)
	res := make([]float32, n)
	for i := range res {
		res[i] = float32(math.Sin(float64(i))) * 1e-3
		velocity[i] = float32(i)
	}
	saved.opt.(*SGD).Velocity = velocity
	if err := saved.reduce.how.Feedback.SetResidual(res); err != nil {
		t.Fatal(err)
	}
	state, err := saved.CheckpointState(w)
	if err != nil {
		t.Fatal(err)
	}
	resumed := strategy("int8")
	if err := resumed.RestoreState(w, state, from); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resumed.reduce.how.Feedback.Residual(), res) || !slices.Equal(resumed.opt.(*SGD).Velocity, velocity) {
		t.Fatal("the resumed rank's residual or velocity differs from the saved one")
	}
	if err := strategy("none").RestoreState(w, state, from); err == nil || !strings.Contains(err.Error(), "Config.Compress is none") {
		t.Errorf("a residual restored into a run without compression: %v", err)
	}
	plain, err := strategy("none").CheckpointState(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.RestoreState(w, plain, from); err != nil || slices.ContainsFunc(resumed.reduce.how.Feedback.Residual(), func(v float32) bool { return v != 0 }) {
		t.Errorf("a part without a residual: %v, residual not zero", err)
	}
	if err := resumed.RestoreState(w, state[:len(state)-4], from); err == nil {
		t.Error("a truncated residual was restored")
	}
	// With an outer optimizer, whose state comes before the residual.
	outerVelocity := slices.Clone(res)
	saved.outer = &SGD{Momentum: 0.9, Velocity: outerVelocity}
	if state, err = saved.CheckpointState(w); err != nil {
		t.Fatal(err)
	}
	resumed = strategy("int8")
	resumed.outer = &SGD{Momentum: 0.9}
	if err := resumed.RestoreState(w, state, from); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resumed.reduce.how.Feedback.Residual(), res) || !slices.Equal(resumed.outer.(*SGD).Velocity, outerVelocity) {
		t.Fatal("with an outer optimizer, the resumed rank's residual or outer velocity differs from the saved one")
	}
}

// TestCompressedRoundsKeepReplicasIdentical trains esync and ssgd with compressed rounds on
// 2–5 ranks: every rank ends with the same model, bitwise.
func TestCompressedRoundsKeepReplicasIdentical(t *testing.T) {
	for _, tc := range []struct{ strategy, collective, compress string }{
		{"esync", "ring", "int8"}, {"esync", "auto", "int8"}, {"ssgd", "auto", "int8"},
		{"ssgd", "butterfly", "bf16"}, {"esync", "binary-blocks", "fp16"},
	} {
		for _, size := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s-%s-%s-np%d", tc.strategy, tc.collective, tc.compress, size), func(t *testing.T) {
				cfg := Config{Strategy: tc.strategy, Collective: tc.collective, Compress: tc.compress,
					Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 8, Seed: 3}
				out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
				if out.err != nil {
					t.Fatal(out.err)
				}
				for r := 1; r < size; r++ {
					if !slices.Equal(out.params[r], out.params[0]) {
						t.Fatalf("rank %d's model differs from rank 0's", r)
					}
				}
			})
		}
	}
}

// TestSSGDResumeKeepsTheErrorFeedback: an ssgd job with int8 rounds, killed after its
// checkpoint of round 8 and resumed from its run directory, ends bitwise where the
// uninterrupted job does: every rank's part holds its residual (a resumed rank starting its
// error feedback from zero sends other numbers in the rounds after the checkpoint).
func TestSSGDResumeKeepsTheErrorFeedback(t *testing.T) {
	const size = 3
	cfg := Config{Strategy: "ssgd", Collective: "ring", Compress: "int8", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: 16, Seed: 3}
	whole := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
	if whole.err != nil {
		t.Fatal(whole.err)
	}
	dir := t.TempDir()
	if killed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 9, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 4}}}); killed.err == nil {
		t.Fatal("the killed job did not fail")
	}
	for r := range size {
		ck, _, err := LoadCheckpoint(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Round != 8 || ck.Rank == nil || *ck.Rank != r || len(ck.State) <= ssgdStateLen {
			t.Fatalf("rank %d: checkpoint of round %d, rank %v, %d bytes of state: want rank %d's part of round 8 with its residual", r, ck.Round, ck.Rank, len(ck.State), r)
		}
	}
	resumed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, resume: dir})
	if resumed.err != nil {
		t.Fatal(resumed.err)
	}
	for r := range size {
		if !slices.Equal(resumed.params[r], whole.params[r]) {
			t.Fatalf("rank %d: the resumed model differs from the uninterrupted one", r)
		}
	}
}
