package trainer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
)

// A user's own model, as a program outside this package writes it: linear regression with
// float targets on synthetic data, its gradient by hand. Nothing of workload/nn or workload/data.

const regDim = 4

var regTrue = [regDim + 1]float64{1, -2, 0.5, 3, 0.7} // weights, then the bias

// regData is n points y = w·x + b + noise; each rank draws its own from (seed, rank).
type regData struct {
	x [][regDim]float32
	y []float32
}

func newRegData(n int, seed uint64, rank int) *regData {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	d := &regData{x: make([][regDim]float32, n), y: make([]float32, n)}
	for i := range d.x {
		y := regTrue[regDim]
		for j := 0; j < regDim; j++ {
			d.x[i][j] = float32(rng.NormFloat64())
			y += regTrue[j] * float64(d.x[i][j])
		}
		d.y[i] = float32(y + 0.1*rng.NormFloat64())
	}
	return d
}

// loss is the mean of ½(w·x + b − y)² over d at params.
func (d *regData) loss(params []float32) float64 {
	sum := 0.0
	for i := range d.x {
		r := d.residual(params, i)
		sum += 0.5 * r * r
	}
	return sum / float64(len(d.x))
}

func (d *regData) residual(params []float32, i int) float64 {
	p := float64(params[regDim])
	for j := 0; j < regDim; j++ {
		p += float64(params[j]) * float64(d.x[i][j])
	}
	return p - float64(d.y[i])
}

// regModel is the trainer.Model: parameters start at zero on every rank.
type regModel struct {
	data   *regData
	batch  int
	pos    int
	params []float32
}

func (m *regModel) Params() []float32 { return m.params }

func (m *regModel) Step(ctx context.Context, grad []float32) (trainer.StepResult, error) {
	clear(grad)
	loss := 0.0
	for k := 0; k < m.batch; k++ {
		i := (m.pos + k) % len(m.data.y)
		r := m.data.residual(m.params, i)
		loss += 0.5 * r * r
		for j := 0; j < regDim; j++ {
			grad[j] += float32(r) * m.data.x[i][j]
		}
		grad[regDim] += float32(r)
	}
	m.pos = (m.pos + m.batch) % len(m.data.y)
	for j := range grad {
		grad[j] /= float32(m.batch)
	}
	return trainer.StepResult{Loss: loss / float64(m.batch), Samples: m.batch}, nil
}

// trainRegression trains one regModel per rank over the in-process transport and returns the
// models and rank 0's result.
func trainRegression(t *testing.T, cfg trainer.Config, size int, reg *trainer.Registry) ([]*regModel, *trainer.Result) {
	t.Helper()
	models, results, errs := runRegression(size, reg, func(r int) (trainer.Config, *regModel) {
		return rankOptions(cfg), &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: make([]float32, regDim+1)}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return models, results[0]
}

// runRegression trains the model rank(r) returns on each rank r, with the configuration it
// returns, and returns every rank's model, result and error.
// options, when given, adjust each rank's TrainOptions.
func runRegression(size int, reg *trainer.Registry, rank func(r int) (trainer.Config, *regModel), options ...func(r int, ep transport.Endpoint, o *trainer.TrainOptions)) ([]*regModel, []*trainer.Result, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eps := transport.NewMemJob(size)
	models := make([]*regModel, size)
	results := make([]*trainer.Result, size)
	errs := make([]error, size)
	done := make(chan struct{}, size)
	held := newRegData(500, 99, -1) // rank 0's evaluation set
	for r := range size {
		var cfg trainer.Config
		cfg, models[r] = rank(r)
		opts := trainer.TrainOptions{Strategies: reg, Eval: func(_ context.Context, p []float32) (float64, float64, error) {
			return 0, held.loss(p), nil
		}}
		for _, o := range options {
			o(r, eps[r], &opts)
		}
		go func() {
			res, err := trainer.Train(ctx, eps[r], cfg, models[r], opts)
			results[r] = res
			if err != nil {
				cancel() // the other ranks would wait for this one
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			}
			_ = eps[r].Close()
			done <- struct{}{}
		}()
	}
	for range size {
		<-done
	}
	return models, results, errs
}

// TestUserModelTrainsUnderEveryStrategy trains the user's regression under every registered
// strategy through the public API: the held-out loss falls far below the initial one, and the
// strategies that keep identical replicas (ssgd, esync, wbsp and wbsp-opt over an allreduce) keep
// them bitwise. Each strategy runs over every collective it supports (wbsp and wbsp-opt: the
// parameter server and each allreduce).
func TestUserModelTrainsUnderEveryStrategy(t *testing.T) {
	identical := map[string]bool{"ssgd": true, "esync": true, "wbsp/allreduce": true, "wbsp-opt/allreduce": true}
	held := newRegData(500, 99, -1)
	initial := held.loss(make([]float32, regDim+1))
	reg := trainer.Builtin()
	for _, strategy := range reg.Names() {
		colls, err := reg.Collectives(strategy)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strategy == "wbsp" || strategy == "wbsp-opt":
			// the parameter-server form and the allreduce form over each collective
			colls = []string{"ps", "ring", "butterfly", "binary-blocks", "auto"}
		case colls == nil:
			colls = []string{"ring"}
		}
		for _, size := range []int{1, 3, 4} {
			for _, coll := range colls {
				t.Run(fmt.Sprintf("%s/%s/%d-ranks", strategy, coll, size), func(t *testing.T) {
					trainUnderStrategy(t, strategy, coll, size, identical[strategy] || (identical[strategy+"/allreduce"] && coll != "ps"), held, initial)
				})
			}
		}
	}
}

// trainUnderStrategy is one case of TestUserModelTrainsUnderEveryStrategy.
func trainUnderStrategy(t *testing.T, strategy, coll string, size int, identical bool, held *regData, initial float64) {
	cfg := trainer.Config{Strategy: strategy, Collective: coll, Batch: 7, LR: 0.05, MaxRounds: 300, Seed: 3,
		Eval: trainer.EvalEvery{Rounds: 50}}
	models, res := trainRegression(t, cfg, size, nil)
	final := held.loss(models[0].Params())
	if !(final < initial/4) {
		t.Errorf("held-out loss %.4f after training, initial %.4f: want it below a quarter", final, initial)
	}
	if n := len(res.Evals); n == 0 || res.FinalLoss != res.Evals[n-1].Loss || math.IsNaN(res.FinalLoss) {
		t.Errorf("rank 0's evaluations %+v, final loss %v: want the final evaluation last", res.Evals, res.FinalLoss)
	}
	if identical {
		for r := 1; r < size; r++ {
			if !slices.Equal(models[r].Params(), models[0].Params()) {
				t.Errorf("rank %d's parameters differ from rank 0's: %v vs %v", r, models[r].Params(), models[0].Params())
			}
		}
	}
}

// TestTrainRejectsBadInput checks that Train names what is wrong instead of training.
func TestTrainRejectsBadInput(t *testing.T) {
	ep := transport.NewMemJob(1)[0]
	defer ep.Close()
	m := &regModel{data: newRegData(10, 1, 0), batch: 3, params: make([]float32, regDim+1)}
	for _, tc := range []struct {
		name  string
		cfg   trainer.Config
		model trainer.Model
		opts  trainer.TrainOptions
		want  string
	}{
		{"unknown strategy", trainer.Config{Strategy: "bsp", Batch: 3, LR: 0.1, MaxRounds: 1}, m, trainer.TrainOptions{}, "known: asgd,"},
		{"epochs without a training-set size", trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1, Epochs: 1}, m, trainer.TrainOptions{}, "Config.Epochs 1 needs the training-set size (TrainOptions.TrainSize)"},
		{"no model", trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1, MaxRounds: 1}, nil, trainer.TrainOptions{}, "needs an endpoint and a model"},
		{"empty model", trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1, MaxRounds: 1}, &regModel{data: m.data, batch: 1}, trainer.TrainOptions{}, "no parameters"},
		// A zero is refused, not taken for the command line's default.
		{"empty strategy", trainer.Config{Batch: 3, LR: 0.1, MaxRounds: 1}, m, trainer.TrainOptions{}, "Config.Strategy is empty: name one of asgd,"},
		{"zero batch", trainer.Config{Strategy: "ssgd", LR: 0.1, MaxRounds: 1}, m, trainer.TrainOptions{}, "Config.Batch must be ≥ 1, got 0"},
		{"zero lr", trainer.Config{Strategy: "ssgd", Batch: 3, MaxRounds: 1}, m, trainer.TrainOptions{}, "Config.LR must be a positive number, got 0"},
		{"no bound", trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1}, m, trainer.TrainOptions{}, "no bound on the run: set Config.Epochs, Config.MaxTime or Config.MaxRounds"},
		// The run directory is RunRank's: Train would not write it.
		{"run directory", trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1, MaxRounds: 1}, m, trainer.TrainOptions{Out: "run"}, "TrainOptions.Out is the run directory's, which Train does not write: use RunRank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trainer.Train(context.Background(), ep, tc.cfg, tc.model, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestRunRankRefusesCheckpointPaths: RunRank checkpoints into its run directory and resumes
// from ResumeDir; a checkpoint directory or checkpoint given beside them would be dropped.
func TestRunRankRefusesCheckpointPaths(t *testing.T) {
	ep := transport.NewMemJob(1)[0]
	defer ep.Close()
	m := &regModel{data: newRegData(10, 1, 0), batch: 3, params: make([]float32, regDim+1)}
	cfg := trainer.Config{Strategy: "ssgd", Batch: 3, LR: 0.1, MaxRounds: 1}
	opts := trainer.TrainOptions{Checkpoint: trainer.CheckpointOptions{Dir: t.TempDir()}}
	if _, err := trainer.RunRank(context.Background(), ep, cfg, m, opts); err == nil || !strings.Contains(err.Error(), "TrainOptions.Checkpoint may set only Every") {
		t.Fatalf("err = %v, want one saying that RunRank takes only Checkpoint.Every", err)
	}
}

// A strategy of the program's own, registered beside the built-in ones: periodic model
// averaging, with an option of its own.

type avgOptions struct {
	Every int `json:"avg_every"`
}

func (o *avgOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Every, "avg-every", 4, "local steps between two model averages")
}

func (o *avgOptions) Defaults(*trainer.Config) {
	if o.Every == 0 {
		o.Every = 4
	}
}

func (o *avgOptions) Validate(_ *trainer.Config, _ int) error {
	if o.Every < 1 {
		return fmt.Errorf("--avg-every must be ≥ 1, got %d", o.Every)
	}
	return nil
}

// periodicAvg takes Every local SGD steps, then averages the models with one allreduce that
// also carries rank 0's stop vote.
type periodicAvg struct {
	every   int
	buf     []float32
	rounds  int
	samples int64
}

func (s *periodicAvg) Name() string { return "periodic-avg" }

func (s *periodicAvg) Start(_ context.Context, w *trainer.Worker) error {
	s.buf = make([]float32, len(w.Params)+1)
	return nil
}

func (s *periodicAvg) Round(ctx context.Context, w *trainer.Worker, stopVote bool) (trainer.RoundStats, error) {
	rs := trainer.RoundStats{GlobalLoss: -1}
	for range s.every {
		st, err := w.LocalStep(ctx)
		if err != nil {
			return rs, err
		}
		w.Apply(w.Grads, 1)
		rs.LocalSteps++
		rs.Samples += st.Samples
		rs.Loss += st.Loss / float64(s.every)
		rs.Compute += st.Compute
	}
	n := len(w.Params)
	copy(s.buf, w.Params)
	s.buf[n] = 0
	if stopVote {
		s.buf[n] = 1
	}
	if err := w.Comm.AllReduce(ctx, collective.F32(s.buf), collective.Sum); err != nil {
		return rs, fmt.Errorf("rank %d: periodic-avg round %d: %w", w.Rank, s.rounds, err)
	}
	for i := range w.Params {
		w.Params[i] = s.buf[i] / float32(w.Size)
	}
	s.rounds++
	s.samples += int64(rs.Samples * w.Size)
	rs.GlobalRounds, rs.GlobalSamples, rs.Stop = s.rounds, s.samples, s.buf[n] > 0.5
	return rs, nil
}

func (s *periodicAvg) Finish(context.Context, *trainer.Worker) error { return nil }

// withPeriodicAvg is the built-in strategies and periodic-avg, a program's own strategy
// without a step-by-step form.
func withPeriodicAvg(t *testing.T) *trainer.Registry {
	t.Helper()
	reg := trainer.Builtin()
	err := reg.Register("periodic-avg", trainer.Factory{
		Options: func() trainer.Options { return &avgOptions{} },
		New: func(cfg *trainer.Config) (trainer.Strategy, error) {
			return &periodicAvg{every: cfg.Options.(*avgOptions).Every}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestOwnStrategyRegistered(t *testing.T) {
	reg := withPeriodicAvg(t)
	held := newRegData(500, 99, -1)
	initial := held.loss(make([]float32, regDim+1))
	for _, size := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("%d-ranks", size), func(t *testing.T) {
			cfg := trainer.Config{Strategy: "periodic-avg", Batch: 7, LR: 0.05, MaxRounds: 60, Seed: 4,
				Eval: trainer.EvalEvery{Rounds: 30}, Options: &avgOptions{Every: 3}}
			models, _ := trainRegression(t, cfg, size, reg)
			if final := held.loss(models[0].Params()); !(final < initial/10) {
				t.Errorf("held-out loss %.4f after training, initial %.4f: want it below a tenth", final, initial)
			}
			for r := 1; r < size; r++ {
				if !slices.Equal(models[r].Params(), models[0].Params()) {
					t.Errorf("rank %d's average differs from rank 0's", r)
				}
			}
		})
	}
	ep := transport.NewMemJob(1)[0]
	defer ep.Close()
	bad := trainer.Config{Strategy: "periodic-avg", Batch: 3, LR: 0.1, MaxRounds: 1, Options: &avgOptions{Every: -1}}
	m := &regModel{data: newRegData(10, 1, 0), batch: 3, params: make([]float32, regDim+1)}
	if _, err := trainer.Train(context.Background(), ep, bad, m, trainer.TrainOptions{Strategies: reg}); err == nil || !strings.Contains(err.Error(), "--avg-every") {
		t.Errorf("--avg-every -1: err = %v, want one naming the option", err)
	}
}

// TestReplicasStartFromRankZero gives every rank its own initial parameters, as a user's model
// seeded by its rank would: the job still trains one model, rank 0's, so the strategies that
// keep identical replicas end with bitwise-identical ones.
func TestReplicasStartFromRankZero(t *testing.T) {
	for _, strategy := range []string{"ssgd", "esync"} {
		for _, size := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/%d-ranks", strategy, size), func(t *testing.T) {
				cfg := trainer.Config{Strategy: strategy, Collective: "ring", Batch: 7, LR: 0.05, MaxRounds: 20, Seed: 3,
					Eval: trainer.EvalEvery{Rounds: 10}}
				models, _, errs := runRegression(size, nil, func(r int) (trainer.Config, *regModel) {
					rng := rand.New(rand.NewPCG(uint64(r), 17)) // a different initialisation on every rank
					params := make([]float32, regDim+1)
					for i := range params {
						params[i] = float32(rng.NormFloat64())
					}
					return cfg, &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: params}
				})
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				for r := 1; r < size; r++ {
					if !slices.Equal(models[r].Params(), models[0].Params()) {
						t.Errorf("rank %d's parameters differ from rank 0's: %v vs %v", r, models[r].Params(), models[0].Params())
					}
				}
			})
		}
	}
}

// TestConfigsMustAgree gives ranks configurations that differ: the job fails at the start on
// every rank with an error naming each differing setting, its values and the ranks holding
// them, instead of training divergent models; ranks that would resume from different
// checkpoints (or one afresh) fail alike. The heterogeneity a rank injects is its own and may
// differ.
func TestConfigsMustAgree(t *testing.T) {
	base := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.1, MaxRounds: 10, Seed: 3, Eval: trainer.EvalEvery{Rounds: 5}}
	for _, tc := range []struct {
		name string
		size int
		edit func(r int, c *trainer.Config)
		want []string // every rank's error says these; none when empty
	}{
		{"lr", 4, func(r int, c *trainer.Config) {
			if r > 0 {
				c.LR = 0.3
			}
		}, []string{"config differs between ranks: Config.LR is 0.1 on rank 0 but 0.3 on ranks 1-3"}},
		{"strategy", 4, func(r int, c *trainer.Config) {
			if r == 2 {
				c.Strategy = "esync"
			}
		}, []string{`Config.Strategy is "ssgd" on ranks 0,1,3 but "esync" on rank 2`, "Config.Options type is trainer.NoOptions on ranks 0,1,3 but *trainer.ESyncConfig on rank 2"}},
		{"strategy option and seed", 3, func(r int, c *trainer.Config) {
			c.Strategy = "esync"
			c.Options = &trainer.ESyncConfig{LocalLR: 0.1 * float64(r+1)}
			if r == 2 {
				c.Seed = 9
			}
		}, []string{"Config.Seed is 3 on ranks 0,1 but 9 on rank 2", "Config.Options.LocalLR is 0.1 on rank 0 but 0.2 on rank 1 and 0.30000000000000004 on rank 2"}},
		{"per-rank slowdown", 3, func(r int, c *trainer.Config) {
			c.Slowdown = []float64{1, 1, float64(r + 1)}
		}, nil},
		{"checkpoint", 3, nil, []string{"the checkpoint resumed from is round 5 (crc32c 0000002a) on ranks 0,1 but none on rank 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, errs := runRegression(tc.size, nil, func(r int) (trainer.Config, *regModel) {
				cfg := base
				if tc.edit != nil {
					tc.edit(r, &cfg)
				}
				return cfg, &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: make([]float32, regDim+1)}
			}, func(r int, _ transport.Endpoint, o *trainer.TrainOptions) {
				if tc.name == "checkpoint" && r < 2 { // rank 2 has no copy of the run: it would start afresh
					o.Checkpoint.Resume = &trainer.Checkpoint{CheckpointHeader: trainer.CheckpointHeader{Strategy: "ssgd", WorldSize: 3, Seed: 3, Round: 5, CRC32C: 42}}
				}
			})
			for r, err := range errs {
				if len(tc.want) == 0 {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					continue
				}
				for _, w := range tc.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: err = %v, want one saying %q", r, err, w)
					}
				}
			}
		})
	}
}

// TestGivenCommRunsConfigCollective gives Train a communicator of its own: a Config.Collective
// that the communicator does not run is refused, naming both, rather than ignored; an empty
// one, the communicator's own, and "ps" for a strategy that runs its own parameter server
// train.
func TestGivenCommRunsConfigCollective(t *testing.T) {
	for _, tc := range []struct {
		strategy, coll string
		want           string // the error; "" trains
	}{
		{"ssgd", "ring", `Config.Collective is "ring", but TrainOptions.Comm runs "butterfly"`},
		{"esync", "ps", `Config.Collective is "ps", but TrainOptions.Comm runs "butterfly"`},
		{"ssgd", "", ""},
		{"ssgd", "butterfly", ""},
		{"asgd", "ps", ""},
		{"wbsp", "ps", ""},
	} {
		t.Run(tc.strategy+"/"+tc.coll, func(t *testing.T) {
			_, _, errs := runRegression(2, nil, func(r int) (trainer.Config, *regModel) {
				cfg := trainer.Config{Strategy: tc.strategy, Collective: tc.coll, Batch: 7, LR: 0.05, MaxRounds: 5, Seed: 3}
				return cfg, &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: make([]float32, regDim+1)}
			}, func(r int, ep transport.Endpoint, o *trainer.TrainOptions) {
				c, err := collective.New(ep, collective.Options{Algorithm: "butterfly"})
				if err != nil {
					t.Fatal(err)
				}
				o.Comm = c
			})
			for r, err := range errs {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("rank %d: %v", r, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("rank %d: err = %v, want one saying %q", r, err, tc.want)
				}
			}
		})
	}
}

// TestTargetStopReasonIsTrue stops on a target accuracy that a snapshot reached and the final
// model, trained on after it, does not: the stop reason names the snapshot that reached the
// target and the final model's lower accuracy, unrounded, rather than passing 0.848 off under
// "reached target accuracy 0.850".
func TestTargetStopReasonIsTrue(t *testing.T) {
	_, results, errs := runRegression(2, nil, func(r int) (trainer.Config, *regModel) {
		cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.05, TargetAcc: 0.85, MaxRounds: 100000, Seed: 3,
			Eval: trainer.EvalEvery{Rounds: 1}}
		return cfg, &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: make([]float32, regDim+1)}
	}, func(r int, _ transport.Endpoint, o *trainer.TrainOptions) {
		calls := 0 // the evaluator runs one evaluation at a time
		o.Eval = func(context.Context, []float32) (float64, float64, error) {
			calls++
			if calls == 1 {
				return 0.85, 1, nil
			}
			return 0.848, 1, nil
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	res := results[0]
	want := regexp.MustCompile(`^reached target accuracy 0\.85: the snapshot after round \d+ scored 0\.85; the final model, after round \d+, scores 0\.848$`)
	if !want.MatchString(res.StopReason) || res.FinalAcc != 0.848 {
		t.Errorf("stop reason %q with final accuracy %v: want the snapshot that reached 0.85 and the final model's 0.848", res.StopReason, res.FinalAcc)
	}
}

// TestParameterServerStartsFromRankZero gives every rank its own initial parameters under
// asgd with its server on rank 1: the server's model, which every worker pulls, starts from
// rank 0's parameters, not from those of the rank hosting it. A learning rate far below the
// parameters' float32 resolution leaves the server's model where it started.
func TestParameterServerStartsFromRankZero(t *testing.T) {
	const size = 3
	initial := make([][]float32, size)
	models, _, errs := runRegression(size, nil, func(r int) (trainer.Config, *regModel) {
		cfg := trainer.Config{Strategy: "asgd", Batch: 7, LR: 1e-30, MaxRounds: 5, Seed: 3,
			Options: &trainer.ASGDOptions{PSPlacement: trainer.PSPlacement{PSRanks: []int{1}}}}
		rng := rand.New(rand.NewPCG(uint64(r), 17))
		initial[r] = make([]float32, regDim+1)
		for i := range initial[r] {
			initial[r][i] = 1 + float32(rng.Float64())
		}
		return cfg, &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: slices.Clone(initial[r])}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range size {
		if !slices.Equal(models[r].Params(), initial[0]) {
			t.Errorf("rank %d ends with %v, want rank 0's initial parameters %v", r, models[r].Params(), initial[0])
		}
	}
}
