package trainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
)

// runSessions runs one RunSession per endpoint, each driven by drive, and returns every
// rank's error (nil for none). A rank's error cancels the others, which would wait for it.
func runSessions(eps []transport.Endpoint, cfg trainer.Config, opts trainer.TrainOptions, drive func(context.Context, *trainer.RunSession) error) []error {
	return runSessionsWith(eps, cfg, opts, drive, true)
}

// runSessionsWith is runSessions; cancelOnError false leaves every rank to end on its own
// error, for a test of the error every rank is told (a rank cancelling the others would cut
// rank 0's messages to the ranks it has not told yet).
func runSessionsWith(eps []transport.Endpoint, cfg trainer.Config, opts trainer.TrainOptions, drive func(context.Context, *trainer.RunSession) error, cancelOnError bool) []error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(eps))
	done := make(chan struct{}, len(eps))
	for r := range eps {
		go func() {
			defer func() { _ = eps[r].Close(); done <- struct{}{} }()
			s, err := trainer.NewRunSession(ctx, eps[r], cfg, make([]float32, regDim+1), nil, opts)
			if err == nil {
				err = drive(ctx, s)
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				if cancelOnError {
					cancel() // the other ranks would wait for this one
				}
			}
		}()
	}
	for range eps {
		<-done
	}
	return errs
}

// TestRunSessionWritesRunDir: a session given a run directory writes what `hetsync train`
// writes: config.json with the configuration (the slowdown among it), every rank's rounds
// with their loss, samples and compute time (a slowed rank's at least its factor × the base
// per step), rank 0's evaluations in eval.jsonl and on its records, and summary.json.
func TestRunSessionWritesRunDir(t *testing.T) {
	const size, rounds = 3, 6
	dir := filepath.Join(t.TempDir(), "run")
	cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.05, MaxRounds: rounds, Seed: 3,
		Slowdown: []float64{1, 1, 3}, SlowdownBase: 2 * time.Millisecond}
	opts := trainer.TrainOptions{Out: dir, DataPath: "mem"}
	errs := runSessions(transport.NewMemJob(size), cfg, opts, func(ctx context.Context, s *trainer.RunSession) error {
		rank := s.Rank()
		m := &regModel{data: newRegData(203, cfg.Seed, rank), batch: 7, params: s.Params()}
		opt := &trainer.SGD{LR: float32(cfg.LR)}
		for round := 0; ; round++ {
			r, err := m.Step(ctx, s.Grads())
			if err != nil {
				return err
			}
			if err := s.Step(ctx, trainer.StepReport{Loss: r.Loss, Samples: r.Samples, Correct: 3, Duration: time.Microsecond}); err != nil {
				return err
			}
			if _, err := s.ShouldSync(ctx); err != nil {
				return err
			}
			st, err := s.Sync(ctx)
			if err != nil {
				return err
			}
			opt.Step(s.Params(), s.Grads(), 1)
			err = s.Eval(0.5+float64(round)/100, r.Loss)
			if rank != 0 {
				if err == nil || !strings.Contains(err.Error(), "evaluations are rank 0's") {
					return fmt.Errorf("an evaluation on rank %d: err = %v, want it refused", rank, err)
				}
			} else if err != nil {
				return err
			}
			if st.Stop {
				_, err := s.Close(ctx)
				if s.Dir() != dir {
					return fmt.Errorf("the session's run directory is %q, want rank 0's %q", s.Dir(), dir)
				}
				return err
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	var config trainer.Config
	readJSON(t, filepath.Join(dir, metrics.ConfigFile), &config)
	if config.Strategy != "ssgd" || len(config.Slowdown) != size || config.Slowdown[2] != 3 || config.SlowdownBase != cfg.SlowdownBase {
		t.Errorf("config.json records %+v, want the session's configuration", config)
	}
	_, recs, evals, err := metrics.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != size*rounds {
		t.Fatalf("metrics.jsonl holds %d records, want %d ranks × %d rounds", len(recs), size, rounds)
	}
	for _, r := range recs {
		if r.Samples != 7 || r.LocalSteps != 1 || !(r.Loss > 0) {
			t.Errorf("rank %d round %d: samples %d, steps %d, loss %v: want the caller's step", r.Rank, r.Round, r.Samples, r.LocalSteps, r.Loss)
		}
		if r.Rank == 2 && r.ComputeS < 0.006 {
			t.Errorf("rank 2 round %d: compute %vs, want at least its slowdown 3 × 2ms", r.Round, r.ComputeS)
		}
		if r.Rank == 0 && (!r.HasAccuracy || r.Accuracy != 0.5+float64(r.Round)/100) {
			t.Errorf("rank 0 round %d: accuracy %v (recorded %v), want its evaluation's", r.Round, r.Accuracy, r.HasAccuracy)
		}
	}
	if len(evals) != rounds || evals[rounds-1].Round != rounds || evals[rounds-1].Accuracy != 0.5+float64(rounds-1)/100 {
		t.Errorf("eval.jsonl holds %+v, want one evaluation after each of %d rounds", evals, rounds)
	}
	sum, err := metrics.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ranks != size || sum.Rounds != rounds || sum.Evaluations != rounds || sum.Collective != "ring" || sum.DataPath != "mem" || sum.EndedEarly != nil {
		t.Errorf("summary.json: %d ranks, %d rounds, %d evaluations over %q on %q, ended early %v",
			sum.Ranks, sum.Rounds, sum.Evaluations, sum.Collective, sum.DataPath, sum.EndedEarly)
	}
}

// TestRunSessionRunDirRefused: a run directory that already holds a run fails the session on
// every rank with rank 0's reason, rather than leaving the other ranks waiting for rank 0.
func TestRunSessionRunDirRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, metrics.ConfigFile), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.05, MaxRounds: 2}
	errs := runSessionsWith(transport.NewMemJob(3), cfg, trainer.TrainOptions{Out: dir}, func(context.Context, *trainer.RunSession) error {
		return errors.New("the session started")
	}, false)
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

// TestRunSessionEndsEarly: when a rank gives up after two rounds, the others' next round
// fails, and rank 0's Close leaves the run directory with the rounds recorded so far and a
// summary.json that says the run ended early.
func TestRunSessionEndsEarly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.05, MaxRounds: 50}
	errs := runSessions(transport.NewMemJob(3), cfg, trainer.TrainOptions{Out: dir}, func(ctx context.Context, s *trainer.RunSession) error {
		for round := 0; ; round++ {
			if s.Rank() == 1 && round == 2 {
				return errors.New("gave up")
			}
			if err := s.Step(ctx, trainer.StepReport{Loss: 1, Samples: 7, Duration: time.Microsecond}); err != nil {
				return err
			}
			if _, err := s.ShouldSync(ctx); err != nil {
				return err
			}
			if _, err := s.Sync(ctx); err != nil {
				_, cerr := s.Close(context.Background())
				return errors.Join(err, cerr)
			}
		}
	})
	if errs[0] == nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "gave up") {
		t.Fatalf("errors %v: want rank 1's and the round it left failing on rank 0", errs)
	}
	sum, err := metrics.ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.EndedEarly == nil || sum.EndedEarly.Round < 1 || sum.Rounds < 2 {
		t.Errorf("summary.json: %d rounds, ended early %v; want the two rounds every rank ran and the early end", sum.Rounds, sum.EndedEarly)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
