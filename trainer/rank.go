package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/workload/data"
	"github.com/hetsync/hetsync/workload/nn"
)

// Workload is what `hetsync train` trains by default: a built-in network on Fashion-MNIST.
// Like Config, it is the same on every rank.
type Workload struct {
	// Model is the network: "mlp" or "cnn".
	Model string `json:"model"`
	// Shard is how the training set is split over ranks: "iid", "by-class" or
	// "by-class-shuffled" (workload/data).
	Shard string `json:"shard"`
	// Devices is each rank's compute device ("cpu", "cuda:N"): one entry for every rank, or
	// one per rank, so that a job can mix GPU and CPU workers. Empty means cpu.
	Devices []string `json:"devices,omitempty"`
}

// Defaults fills the zero fields with the defaults of `hetsync train`.
func (wl *Workload) Defaults() {
	if wl.Model == "" {
		wl.Model = "mlp"
	}
	if wl.Shard == "" {
		wl.Shard = "iid"
	}
}

// Validate checks wl for a job of size ranks.
func (wl *Workload) Validate(size int) error {
	if wl.Model == "" {
		return fmt.Errorf("trainer: --model is empty (want mlp or cnn)")
	}
	if !slices.Contains(nn.Models(), wl.Model) {
		return fmt.Errorf("trainer: --model %q: unknown (known: %s)", wl.Model, strings.Join(nn.Models(), ", "))
	}
	if _, err := data.ParseSplit(wl.Shard); err != nil {
		return fmt.Errorf("trainer: --shard: %w", err)
	}
	return wl.validateDevices(size)
}

// RunRecord is what config.json records of a RunRank job by default.
type RunRecord struct {
	Config
	Workload
}

// RankOptions are one rank's local settings for RunRank.
type RankOptions struct {
	// DataDir is the --data flag ("" searches $HETSYNC_DATA, the Debian package, the cache).
	DataDir string
	// Out is the run directory rank 0 writes ("" writes nothing). The other ranks take rank
	// 0's (their own Out is not used) and append their records to its ranks/ on their own
	// host as the job runs, a local copy of what they send rank 0 at the end.
	Out string
	// Config is what config.json records (typically a RunRecord plus launch details); nil
	// records the RunRecord.
	Config any
	// Threads is the number of kernel threads of this rank's device; 0 shares the host's
	// cores among LocalSize ranks.
	Threads   int
	LocalSize int
	// EvalBatch is the evaluator's batch size (default 1000).
	EvalBatch int
	// Progress receives rank 0's progress lines and the final summary; nil is silent.
	Progress io.Writer
	// DataProgress receives download progress if the data set must be fetched; nil is silent.
	DataProgress io.Writer
	// Strategies are the strategies cfg.Strategy may name; nil means Builtin.
	Strategies *Registry
	// Links is the job's link matrix (hetsync.Comm.Links: --plan-links measure or a file), the
	// same on every rank; the training communicator plans its collectives from it. nil plans
	// without one.
	Links *topology.Matrix
	// DataPath is the transport and data path of the job's bytes, for summary.json ("mem",
	// "p2p data-path=tcp"); "" records none.
	DataPath string
	// Watch is what the rank's communicator reports (TrainOptions.Watch).
	Watch collective.Watch
	// Comm is the job's communicator, which the rounds run over (TrainOptions.Comm); nil
	// builds one over the endpoint.
	Comm Collective
	// CheckpointEvery is how often a checkpoint is written into rank 0's Out (by rank 0, or
	// each rank its part for a PerRankCheckpointer); zero writes none.
	CheckpointEvery EvalEvery
	// Resume is the run directory whose checkpoint every rank continues from (it must be
	// readable at this path on every rank's host); rank 0 then continues that run directory,
	// which Out must name.
	Resume string
	// AfterRound and AfterEval, when set, see each of this rank's round records and rank 0's
	// evaluations as they are taken (a live exporter), besides the run directory.
	AfterRound func(*metrics.RoundRecord)
	AfterEval  func(EvalResult)
}

// RankResult is what RunRank returns.
type RankResult struct {
	Result  *Result
	Summary *metrics.Summary // rank 0 with Out set
}

// RunRank is a whole training rank on Fashion-MNIST, the default workload of `hetsync train`:
// it loads the data and its shard, builds the built-in network on the rank's device, trains it
// through Train, gathers every rank's metrics to rank 0, and on rank 0 writes the run
// directory and prints the summary.
func RunRank(ctx context.Context, ep transport.Endpoint, cfg Config, wl Workload, opts RankOptions) (*RankResult, error) {
	rank, size := ep.Rank(), ep.Size()
	reg := opts.Strategies
	if reg == nil {
		reg = Builtin()
	}
	if err := reg.Validate(&cfg, size); err != nil {
		return nil, err
	}
	wl.Defaults()
	if err := wl.Validate(size); err != nil {
		return nil, err
	}
	loc := data.NewLocator(opts.DataDir)
	loc.Progress = opts.DataProgress
	dir, err := loc.Locate(ctx)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %w", rank, err)
	}
	train, test, err := data.LoadFashionMNIST(dir)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %w", rank, err)
	}
	split, err := data.ParseSplit(wl.Shard)
	if err != nil {
		return nil, err
	}
	shard, err := data.NewShard(train, data.ShardConfig{Split: split, Rank: rank, Size: size, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	it, err := shard.Batches(cfg.Batch)
	if err != nil {
		return nil, err
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = max(1, runtime.NumCPU()/max(1, opts.LocalSize))
	}
	dev, err := openDevice(rank, wl.DeviceFor(rank), threads)
	if err != nil {
		return nil, err
	}
	model, err := nn.NewModel(wl.Model, dev, cfg.Batch, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %w", rank, err)
	}
	m, err := NewBatchModel(nnModel{model}, &shardBatches{it: it})
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %w", rank, err)
	}
	topts := TrainOptions{Strategies: reg, TrainSize: shard.Len() * size, Progress: opts.Progress, Comm: opts.Comm, Links: opts.Links, Watch: opts.Watch,
		Checkpoint: CheckpointOptions{Dir: opts.Out, Every: opts.CheckpointEvery}}
	if opts.Resume != "" {
		if topts.Checkpoint.Resume, topts.Checkpoint.File, err = LoadCheckpoint(opts.Resume, rank); err != nil {
			return nil, fmt.Errorf("trainer: rank %d: --resume %s: %w", rank, opts.Resume, err)
		}
	}
	if rank == 0 {
		if topts.Eval, err = newTestEvaluator(wl.Model, cfg.Seed, test, opts.EvalBatch); err != nil {
			return nil, err
		}
	}
	var kept []metrics.RoundRecord // a resumed run's rounds before its checkpoint
	if ck := topts.Checkpoint.Resume; ck != nil && rank == 0 && opts.Out != "" {
		// Before the other ranks learn the run directory and append to their files in it.
		var evals []metrics.EvalRecord
		if kept, evals, err = RewindRun(opts.Out, ck.Round); err != nil {
			return nil, err
		}
		topts.Checkpoint.Evaluated = slices.ContainsFunc(evals, func(e metrics.EvalRecord) bool { return e.Round == ck.GlobalRounds })
	}
	runDir, err := shareRunDir(ctx, ep, opts.Out)
	if err != nil {
		return nil, err
	}
	// Per-rank checkpoints put every rank's part into rank 0's run directory.
	topts.Checkpoint.Dir = runDir
	config := opts.Config
	if config == nil {
		config = RunRecord{Config: cfg, Workload: wl}
	}
	live, err := openLiveRun(runDir, rank, config, topts.Checkpoint.Resume != nil)
	if err != nil {
		return nil, err
	}
	topts.AfterRound, topts.AfterEval, topts.Failed = live.round, live.eval, live.err
	if after := opts.AfterRound; after != nil {
		topts.AfterRound = func(r *metrics.RoundRecord) { live.round(r); after(r) }
	}
	if after := opts.AfterEval; after != nil {
		topts.AfterEval = func(e EvalResult) { live.eval(e); after(e) }
	}
	fail := func(err error) (*RankResult, error) {
		if eerr := live.endEarly(ctx, err); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return nil, err
	}
	res, err := Train(ctx, ep, cfg, m, topts)
	if err != nil {
		return fail(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	all, err := GatherRecords(gctx, ep, res.Records)
	if err != nil {
		return fail(err)
	}
	out := &RankResult{Result: res}
	if rank != 0 || runDir == "" {
		live.close()
		return out, live.err()
	}
	sum, err := live.finish(append(kept, all...), Ran{Collective: res.Collective, DataPath: opts.DataPath})
	if err != nil {
		return fail(err)
	}
	out.Summary = &sum
	if opts.Progress != nil {
		fmt.Fprint(opts.Progress, FormatSummary(sum, res.StopReason))
		fmt.Fprintf(opts.Progress, "  run directory: %s\n", opts.Out)
	}
	return out, nil
}

// newTestEvaluator evaluates snapshots on the full test set with a private model on a
// single-threaded device of its own (a Device is not safe for concurrent use).
func newTestEvaluator(model string, seed uint64, test *data.Dataset, batch int) (EvalFunc, error) {
	if batch <= 0 {
		batch = 1000
	}
	dev, err := kernels.NewCPU(1)
	if err != nil {
		return nil, err
	}
	m, err := nn.NewModel(model, dev, batch, seed)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, params []float32) (float64, float64, error) {
		if err := m.ParamsFromHost(params); err != nil {
			return 0, 0, err
		}
		loss, correct, err := m.Evaluate(test.Images, test.Labels)
		if err != nil {
			return 0, 0, err
		}
		return float64(correct) / float64(test.N), loss, nil
	}, nil
}

// nnModel adapts *nn.Model to Model.
type nnModel struct{ m *nn.Model }

func (a nnModel) NumParams() int { return a.m.NumParams() }
func (a nnModel) ForwardBackward(x []float32, labels []uint8) (float64, int, error) {
	return a.m.ForwardBackward(x, labels)
}
func (a nnModel) ReadParams(dst []float32) error  { return a.m.ParamsToHost(dst) }
func (a nnModel) WriteParams(src []float32) error { return a.m.ParamsFromHost(src) }
func (a nnModel) ReadGrads(dst []float32) error   { return a.m.GradsToHost(dst) }

// shardBatches adapts a data.BatchIterator to Batches.
type shardBatches struct {
	it *data.BatchIterator
	b  data.Batch
}

// SeekSteps moves to the batch after steps batches from the start, replaying only the
// current epoch's batches (an epoch's order depends on its number alone).
func (s *shardBatches) SeekSteps(steps uint64) error {
	per := uint64(s.it.BatchesPerEpoch())
	s.it.SeekEpoch(int(steps / per))
	for i := uint64(0); i < steps%per; i++ {
		s.it.Next(&s.b)
	}
	return nil
}

func (s *shardBatches) Next() ([]float32, []uint8, error) {
	s.it.Next(&s.b)
	return s.b.Images, s.b.Labels, nil
}
