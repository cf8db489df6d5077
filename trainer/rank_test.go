package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
)

// TestRunRankRunDirRefused: a run directory rank 0 cannot write (one that already holds a
// run) fails RunRank on every rank with rank 0's reason. The ranks do not cancel each other:
// a rank told nothing would wait for rank 0 until the context ends, and fail with another
// error.
func TestRunRankRunDirRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, metrics.ConfigFile), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 3, LR: 0.1, MaxRounds: 2}
	eps := transport.NewMemJob(3)
	errs := make([]error, len(eps))
	done := make(chan struct{}, len(eps))
	for r := range eps {
		go func() {
			defer func() { _ = eps[r].Close(); done <- struct{}{} }()
			m := &regModel{data: newRegData(12, 1, 0), batch: 3, params: make([]float32, regDim+1)}
			_, errs[r] = trainer.RunRank(ctx, eps[r], cfg, m, trainer.TrainOptions{Out: dir})
		}()
	}
	for range eps {
		<-done
	}
	for r, err := range errs {
		want := "already holds a run"
		if r > 0 {
			want = "rank 0 cannot write the run directory: "
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: err = %v, want one with %q", r, err, want)
		}
	}
}
