package extend

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/workload"
)

// localSGDOptions are the strategy's own options: --sync-period.
type localSGDOptions struct {
	Period int `json:"sync_period"`
}

func (o *localSGDOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Period, "sync-period", 4, "local steps between two model averages")
}

func (o *localSGDOptions) Defaults(*trainer.Config) {
	if o.Period == 0 {
		o.Period = 4
	}
}

func (o *localSGDOptions) Validate(*trainer.Config, int) error {
	if o.Period < 1 {
		return fmt.Errorf("--sync-period must be ≥ 1, got %d", o.Period)
	}
	return nil
}

// localSGD is local SGD in step-by-step form (trainer.Stepped): each rank's optimizer applies
// its own steps, and after every Period steps the ranks average their models with one
// allreduce, which also carries rank 0's stop vote and the ranks' sample counts. Its Round is
// the trainer's loop over those methods, so Train and a caller's Session drive the same code.
type localSGD struct {
	period  int
	buf     []float32
	st      trainer.RoundStats // the round in progress
	rounds  int
	samples int64
}

const localSGDExtra = 2 // stop vote, samples

func (s *localSGD) Name() string { return "local-sgd" }

func (s *localSGD) Start(_ context.Context, w *trainer.Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("rank %d: local-sgd needs a communicator", w.Rank)
	}
	s.buf = make([]float32, len(w.Params)+localSGDExtra)
	return nil
}

func (s *localSGD) Round(ctx context.Context, w *trainer.Worker, stopVote bool) (trainer.RoundStats, error) {
	return trainer.StepRound(ctx, w, s, stopVote)
}

func (s *localSGD) Finish(context.Context, *trainer.Worker) error { return nil }

func (s *localSGD) Exchange() trainer.Exchange { return trainer.ExchangeParams }

func (s *localSGD) Optimizer(w *trainer.Worker) trainer.Optimizer { return w.Opt }

func (s *localSGD) Begin(context.Context, *trainer.Worker) error {
	s.st = trainer.RoundStats{GlobalLoss: -1}
	return nil
}

func (s *localSGD) AfterStep(_ *trainer.Worker, r trainer.StepReport) {
	s.st.LocalSteps++
	s.st.Samples += r.Samples
	s.st.Correct += r.Correct
	s.st.Loss += r.Loss / float64(s.period)
	s.st.Compute += r.Duration
}

func (s *localSGD) ShouldSync(context.Context, *trainer.Worker) (bool, error) {
	return s.st.LocalSteps >= s.period, nil
}

func (s *localSGD) Sync(ctx context.Context, w *trainer.Worker, stopVote bool) (trainer.RoundStats, error) {
	n := len(w.Params)
	copy(s.buf, w.Params)
	s.buf[n], s.buf[n+1] = 0, float32(s.st.Samples)
	if stopVote {
		s.buf[n] = 1
	}
	t0 := time.Now()
	if err := w.Comm.AllReduce(ctx, collective.F32(s.buf), collective.Sum); err != nil {
		return s.st, fmt.Errorf("rank %d: local-sgd round %d: %w", w.Rank, s.rounds, err)
	}
	s.st.Comm = time.Since(t0)
	for i := range w.Params {
		w.Params[i] = s.buf[i] / float32(w.Size)
	}
	s.rounds++
	s.samples += int64(s.buf[n+1] + 0.5)
	s.st.GlobalRounds, s.st.GlobalSamples, s.st.Stop = s.rounds, s.samples, s.buf[n] > 0.5
	return s.st, nil
}

// stripes is a data set in Fashion-MNIST's layout on which the MLP learns in a few rounds (an
// image's label is the band of rows that is bright), 240 training and 60 test images written
// by workload's tests (writeStripeIDX) and gzipped: the built-in workload's whole path, at a
// fraction of the real data set's load time.
const stripes = "testdata/stripes"

// strategies is the built-in strategies and local-sgd.
func strategies(t *testing.T) *trainer.Registry {
	t.Helper()
	reg := trainer.Builtin()
	err := reg.Register("local-sgd", trainer.Factory{
		Options: func() trainer.Options { return &localSGDOptions{} },
		New: func(cfg *trainer.Config) (trainer.Strategy, error) {
			return &localSGD{period: cfg.Options.(*localSGDOptions).Period}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestStrategyFromOutside registers local-sgd beside the built-in strategies, sets its option
// from a flag as `hetsync train` does (the options' own FlagSet), and trains the built-in
// workload (the MLP on data in Fashion-MNIST's layout) with it on three in-process ranks
// through `hetsync train`'s path, writing a run directory: every round averages after the
// flag's number of steps, the run directory records the option, and the model learns.
func TestStrategyFromOutside(t *testing.T) {
	reg := strategies(t)
	opts, err := reg.Options("local-sgd")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("local-sgd", flag.ContinueOnError)
	opts.Flags(fs)
	if err := fs.Parse([]string{"--sync-period", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := reg.CheckOptionFlags("ssgd", func(f string) bool { return f == "sync-period" }); err == nil {
		t.Error("--sync-period given for ssgd: accepted, want it refused as local-sgd's")
	}

	const size, rounds = 3, 10
	cfg := trainer.Config{Strategy: "local-sgd", Collective: "ring", Batch: 16, Momentum: 0.9, MaxRounds: rounds, Seed: 7, Options: opts}
	cfg.Defaults()
	out := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = hetsync.InitLocal(ctx, size, func(ctx context.Context, c *hetsync.Comm) error {
		o := workload.Options{DataDir: stripes, Threads: 1, LocalSize: size, EvalBatch: 32,
			TrainOptions: trainer.TrainOptions{Strategies: reg, Links: c.Links(), DataPath: "mem"}}
		if c.Rank() == 0 {
			o.Out = out
		}
		_, err := workload.RunRank(ctx, c.Endpoint(), cfg, workload.Workload{}, o)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := metrics.ReadSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ranks != size || sum.Collective != "ring" {
		t.Errorf("summary of %d ranks over %q, want %d over ring", sum.Ranks, sum.Collective, size)
	}
	if !(sum.FinalAccuracy >= 0.9) {
		t.Errorf("final test accuracy %.3f after %d rounds on the stripe task, want ≥ 0.9", sum.FinalAccuracy, rounds)
	}
	_, recs, _, err := metrics.LoadRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != size*rounds {
		t.Fatalf("%d round records, want %d", len(recs), size*rounds)
	}
	for _, r := range recs {
		if r.LocalSteps != 3 {
			t.Fatalf("rank %d round %d took %d local steps, want --sync-period's 3", r.Rank, r.Round, r.LocalSteps)
		}
	}
	config, err := os.ReadFile(filepath.Join(out, metrics.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(config), `"sync_period": 3`) {
		t.Errorf("config.json does not record --sync-period 3:\n%s", config)
	}
}
