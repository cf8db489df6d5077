package workload

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/workload/data"
	"github.com/hetsync/hetsync/workload/nn"
)

// Options are one rank's local settings for RunRank: where the data set is and how the rank
// computes, beside the trainer's own (the run directory, hooks, checkpoints).
type Options struct {
	trainer.TrainOptions
	// DataDir is the --data flag ("" searches $HETSYNC_DATA, the Debian package, the cache).
	DataDir string
	// Threads is the number of kernel threads of this rank's device; 0 shares the host's
	// cores among LocalSize ranks.
	Threads   int
	LocalSize int
	// EvalBatch is the evaluator's batch size (default 1000).
	EvalBatch int
	// DataProgress receives download progress if the data set must be fetched; nil is silent.
	DataProgress io.Writer
}

// RunRank is a whole rank of `hetsync train` on Fashion-MNIST: it loads the data and its
// shard, builds the built-in network on the rank's device and a test-set evaluator on rank 0,
// and runs them through trainer.RunRank (training, gathering, the run directory). config.json
// records a RunRecord unless opts.Record says otherwise.
func RunRank(ctx context.Context, ep transport.Endpoint, cfg trainer.Config, wl Workload, opts Options) (*trainer.RankResult, error) {
	rank, size := ep.Rank(), ep.Size()
	reg := opts.Strategies
	if reg == nil {
		reg = trainer.Builtin()
	}
	// Checked before the data set is loaded, so that a bad flag fails at once.
	if err := reg.Validate(&cfg, size); err != nil {
		return nil, err
	}
	wl.Defaults()
	if err := wl.Validate(size); err != nil {
		return nil, err
	}
	m, trainSize, test, err := wl.model(ctx, rank, size, cfg, opts)
	if err != nil {
		return nil, err
	}
	ropts := opts.TrainOptions
	ropts.Strategies, ropts.TrainSize = reg, trainSize
	if rank == 0 {
		if ropts.Eval, err = newTestEvaluator(wl.Model, cfg.Seed, test, opts.EvalBatch); err != nil {
			return nil, err
		}
	}
	if ropts.Record == nil {
		ropts.Record = RunRecord{Config: cfg, Workload: wl}
	}
	return trainer.RunRank(ctx, ep, cfg, m, ropts)
}

// model loads the data set and builds rank's model over its shard on its device; it returns
// the job's training-set size and the test set.
func (wl *Workload) model(ctx context.Context, rank, size int, cfg trainer.Config, opts Options) (trainer.Model, int, *data.Dataset, error) {
	loc := data.NewLocator(opts.DataDir)
	loc.Progress = opts.DataProgress
	dir, err := loc.Locate(ctx)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workload: rank %d: %w", rank, err)
	}
	train, test, err := data.LoadFashionMNIST(dir)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workload: rank %d: %w", rank, err)
	}
	split, err := data.ParseSplit(wl.Shard)
	if err != nil {
		return nil, 0, nil, err
	}
	shard, err := data.NewShard(train, data.ShardConfig{Split: split, Rank: rank, Size: size, Seed: cfg.Seed})
	if err != nil {
		return nil, 0, nil, err
	}
	it, err := shard.Batches(cfg.Batch)
	if err != nil {
		return nil, 0, nil, err
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = max(1, runtime.NumCPU()/max(1, opts.LocalSize))
	}
	dev, err := openDevice(rank, wl.DeviceFor(rank), threads)
	if err != nil {
		return nil, 0, nil, err
	}
	net, err := nn.NewModel(wl.Model, dev, cfg.Batch, cfg.Seed)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workload: rank %d: %w", rank, err)
	}
	m, err := trainer.NewBatchModel(nnModel{net}, &shardBatches{it: it})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workload: rank %d: %w", rank, err)
	}
	return m, shard.Len() * size, test, nil
}

// newTestEvaluator evaluates snapshots on the full test set with a private model on a
// single-threaded device of its own (a Device is not safe for concurrent use).
func newTestEvaluator(model string, seed uint64, test *data.Dataset, batch int) (trainer.EvalFunc, error) {
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

// nnModel adapts *nn.Model to trainer.Network.
type nnModel struct{ m *nn.Model }

func (a nnModel) NumParams() int { return a.m.NumParams() }
func (a nnModel) ForwardBackward(x []float32, labels []uint8) (float64, int, error) {
	return a.m.ForwardBackward(x, labels)
}
func (a nnModel) ReadParams(dst []float32) error  { return a.m.ParamsToHost(dst) }
func (a nnModel) WriteParams(src []float32) error { return a.m.ParamsFromHost(src) }
func (a nnModel) ReadGrads(dst []float32) error   { return a.m.GradsToHost(dst) }

// shardBatches adapts a data.BatchIterator to trainer.Batches and trainer.DataSeeker.
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
