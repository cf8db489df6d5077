package trainer_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
)

// TestSessionDrivesESyncOverlap drives ESync with overlapping rounds from a loop the caller
// owns on 1 to 3 ranks: every rank ends after the same round (the bound and the one that
// flushes) with the same model, and on one rank, whose rounds are deterministic, with Train's
// model bit for bit.
func TestSessionDrivesESyncOverlap(t *testing.T) {
	const rounds = 12
	for size := 1; size <= 3; size++ {
		t.Run(fmt.Sprintf("%d-ranks", size), func(t *testing.T) {
			cfg := trainer.Config{Strategy: "esync", Collective: "ring", Batch: 7, LR: 0.05, Momentum: 0.5, MaxRounds: rounds, Seed: 3,
				Outer: trainer.OuterNesterov, Options: &trainer.ESyncConfig{Overlap: true}}
			params := driveESyncSession(t, cfg, size)
			cfg.Options = &trainer.ESyncConfig{Overlap: true}
			models, _ := trainRegression(t, cfg, size, nil)
			if size == 1 && !slices.Equal(params[0], models[0].Params()) {
				t.Errorf("the caller's loop reached %v, Train %v", params[0], models[0].Params())
			}
		})
	}
}

// TestSessionDrivesESyncPaced drives ESync's paced rounds from a loop the caller owns on 1 to
// 3 ranks: ShouldSync answers from the exchange in flight, and every rank ends after the same
// round (the bound and the one that flushes) with the same model.
func TestSessionDrivesESyncPaced(t *testing.T) {
	for size := 1; size <= 3; size++ {
		t.Run(fmt.Sprintf("%d-ranks", size), func(t *testing.T) {
			driveESyncSession(t, trainer.Config{Strategy: "esync", Collective: "ring", Batch: 7, LR: 0.05, Momentum: 0.5, MaxRounds: 8, Seed: 3,
				Outer: trainer.OuterNesterov, Compress: "int8", Options: &trainer.ESyncConfig{Overlap: true, Paced: true}}, size)
		})
	}
}

// driveESyncSession runs cfg, ESync with overlapping rounds, from a caller's loop on size
// ranks and fails t unless every rank ran cfg.MaxRounds rounds and the one that flushes and
// ended with rank 0's model; it returns the models.
func driveESyncSession(t *testing.T, cfg trainer.Config, size int) [][]float32 {
	t.Helper()
	params, results := userLoop(t, cfg, transport.NewMemJob(size))
	for r := range size {
		if n := len(results[r].Records); n != cfg.MaxRounds+1 {
			t.Fatalf("rank %d ran %d rounds, want %d", r, n, cfg.MaxRounds+1)
		}
		if r > 0 && !slices.Equal(params[r], params[0]) {
			t.Errorf("rank %d's parameters differ from rank 0's", r)
		}
	}
	return params
}
