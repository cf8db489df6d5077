package workload

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/workload/data"
)

// writeStripeIDX writes a Fashion-MNIST-shaped IDX pair in which the label of an image is the
// band of rows that is bright: a task the MLP learns in a few rounds.
func writeStripeIDX(t *testing.T, dir, images, labels string, n int, offset int) {
	t.Helper()
	img := binary.BigEndian.AppendUint32(nil, 0x00000803)
	for _, d := range []int{n, data.ImageRows, data.ImageCols} {
		img = binary.BigEndian.AppendUint32(img, uint32(d))
	}
	lab := binary.BigEndian.AppendUint32(nil, 0x00000801)
	lab = binary.BigEndian.AppendUint32(lab, uint32(n))
	for i := 0; i < n; i++ {
		c := (i*7 + offset) % 10
		lab = append(lab, byte(c))
		for r := 0; r < data.ImageRows; r++ {
			for col := 0; col < data.ImageCols; col++ {
				v := byte((r*31 + col*17 + i) % 40) // background noise
				if r/2 == c+2 {
					v = 255
				}
				img = append(img, v)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, images), img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, labels), lab, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRunRankWritesRunDirectory runs whole ranks (data files, shards, the MLP, the
// communicator, evaluation, gathering, the run directory) on the in-process transport.
func TestRunRankWritesRunDirectory(t *testing.T) {
	dir := t.TempDir()
	writeStripeIDX(t, dir, data.TrainImagesFile, data.TrainLabelsFile, 240, 0)
	writeStripeIDX(t, dir, data.TestImagesFile, data.TestLabelsFile, 60, 3)
	out := filepath.Join(dir, "run")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// A link matrix reaches the training communicator: hier- configurations need one.
	links := topology.Uniform(2, 30e-6, 1e-9)
	for _, tc := range []struct {
		strat, coll, ran string
		links            *topology.Matrix
	}{
		{"ssgd", "ring", "ring", nil},
		{"asgd", "", trainer.ParameterServer, nil},
		{"wbsp", "ps", trainer.ParameterServer, nil},
		{"wbsp", "butterfly", "butterfly", nil},
		{"wbsp-opt", "auto", "recursive-doubling", nil},
		{"esync", "hier-ring", "hier-ring", links},
	} {
		strat := tc.strat
		t.Run(strat+"-"+tc.coll, func(t *testing.T) {
			cfg := trainer.Config{Strategy: strat, Collective: tc.coll, Batch: 16, Momentum: 0.9, MaxRounds: 30, Eval: trainer.EvalEvery{Rounds: 10}}
			cfg.Defaults()
			const size = 2
			eps := transport.NewMemJob(size)
			results := make([]*trainer.RankResult, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r, ep := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := Options{DataDir: dir, Threads: 1, EvalBatch: 32, TrainOptions: trainer.TrainOptions{DataPath: "mem", Links: tc.links}}
					if r == 0 {
						o.Out = filepath.Join(out, strat+"-"+tc.coll)
					}
					results[r], errs[r] = RunRank(ctx, ep, cfg, Workload{}, o)
					if errs[r] != nil {
						cancel()
					}
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			sum := results[0].Summary
			if sum == nil || results[1].Summary != nil {
				t.Fatal("only rank 0 should return a summary")
			}
			if sum.Ranks != size || sum.Evaluations < 2 {
				t.Fatalf("summary %+v: want %d ranks and at least 2 evaluations", sum, size)
			}
			if sum.FinalAccuracy < 0.9 {
				t.Errorf("final accuracy %.3f on the stripe task, want ≥ 0.9", sum.FinalAccuracy)
			}
			// summary.json records what the rounds ran over, and on which path
			raw, err := os.ReadFile(filepath.Join(out, strat+"-"+tc.coll, metrics.SummaryFile))
			if err != nil {
				t.Fatal(err)
			}
			var written metrics.Summary
			if err := json.Unmarshal(raw, &written); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(written.Collective, tc.ran) || written.DataPath != "mem" || sum.Collective != written.Collective {
				t.Errorf("summary.json records collective %q on %q (returned %q), want %q on mem", written.Collective, written.DataPath, sum.Collective, tc.ran)
			}
			_, rounds, _, err := metrics.LoadRun(filepath.Join(out, strat+"-"+tc.coll))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]int{}
			for _, r := range rounds {
				seen[r.Rank]++
			}
			if seen[0] == 0 || seen[1] == 0 {
				t.Fatalf("metrics.jsonl lacks a rank: %v", seen)
			}
			// every rank also wrote its own records as it ran, and rank 0 its evaluations
			for r := range size {
				if n := countLines(t, metrics.RankRecordsPath(filepath.Join(out, strat+"-"+tc.coll), r)); n != seen[r] {
					t.Errorf("ranks/rank-%d.jsonl has %d lines, metrics.jsonl %d records of the rank", r, n, seen[r])
				}
			}
			if n := countLines(t, filepath.Join(out, strat+"-"+tc.coll, metrics.EvalFile)); n != sum.Evaluations {
				t.Errorf("eval.jsonl has %d lines, summary %d evaluations", n, sum.Evaluations)
			}
			if written.EndedEarly != nil {
				t.Errorf("a finished run's summary says %v", written.EndedEarly)
			}
		})
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// failingEndpoint fails every Send once fail is set: rank 0's link broken under it.
type failingEndpoint struct {
	transport.Endpoint
	fail atomic.Bool
}

func (f *failingEndpoint) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if f.fail.Load() {
		return fmt.Errorf("rank %d: send to rank %d: injected link failure", f.Rank(), to)
	}
	return f.Endpoint.Send(ctx, to, h, payload)
}

// TestRunRankEndsEarly stops ranks halfway, by cancelling the job's context (Ctrl-C) and by
// rank 0 failing on its own (its link broken), and checks that rank 0 leaves a run directory
// with what the ranks measured and a summary saying that the run ended early, where and why.
func TestRunRankEndsEarly(t *testing.T) {
	dir := t.TempDir()
	writeStripeIDX(t, dir, data.TrainImagesFile, data.TrainLabelsFile, 240, 0)
	writeStripeIDX(t, dir, data.TestImagesFile, data.TestLabelsFile, 60, 3)
	for _, tc := range []struct {
		name   string
		size   int
		fails  bool // rank 0's sends fail; otherwise every rank's context is cancelled
		reason string
	}{
		{"interrupt-1", 1, false, "interrupted: context canceled"},
		{"interrupt-3", 3, false, "interrupted: context canceled"},
		{"rank-0-fails-2", 2, true, "injected link failure"},
		{"rank-0-fails-5", 5, true, "injected link failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := trainer.Config{Strategy: "ssgd", Collective: "ring", Batch: 8, MaxRounds: 1 << 20, Eval: trainer.EvalEvery{Rounds: 5}}
			cfg.Defaults()
			eps := transport.NewMemJob(tc.size)
			rank0 := &failingEndpoint{Endpoint: eps[0]}
			eps[0] = rank0
			errs := make([]error, tc.size)
			ctxs := make([]context.Context, tc.size)
			cancels := make([]context.CancelFunc, tc.size)
			for r := range ctxs {
				ctxs[r], cancels[r] = context.WithCancel(ctx)
				defer cancels[r]()
			}
			var wg sync.WaitGroup
			for r, ep := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[r] = RunRank(ctxs[r], ep, cfg, Workload{}, Options{DataDir: dir, Threads: 1, EvalBatch: 32, TrainOptions: trainer.TrainOptions{Out: out}})
					if r == 0 {
						cancel() // the others need not notice a failed rank 0 by themselves
					}
				}()
			}
			// halfway: once every rank has written 12 rounds of its own (a rank may be a round
			// behind the others when it writes) and rank 0 an evaluation (on a goroutine of its
			// own, at its own pace)
			written := func() bool {
				for r := range tc.size {
					b, _ := os.ReadFile(metrics.RankRecordsPath(out, r))
					if strings.Count(string(b), "\n") < 12 {
						return false
					}
				}
				return true
			}
			for {
				e, _ := os.ReadFile(filepath.Join(out, metrics.EvalFile))
				if written() && strings.Count(string(e), "\n") >= 1 {
					break
				}
				if ctx.Err() != nil {
					t.Fatal("the ranks did not write 12 rounds and an evaluation in time")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if tc.fails {
				rank0.fail.Store(true)
			} else {
				cancel()
			}
			wg.Wait()
			if errs[0] == nil {
				t.Fatal("rank 0 returned no error")
			}
			sum, err := metrics.ReadSummary(out)
			if err != nil {
				t.Fatal(err)
			}
			if sum.EndedEarly == nil || !strings.Contains(sum.EndedEarly.Reason, tc.reason) || sum.EndedEarly.Round < 11 {
				t.Fatalf("summary.json ended_early = %+v, want round ≥ 11 and a reason with %q (rank 0: %v)", sum.EndedEarly, tc.reason, errs[0])
			}
			t.Logf("%s", sum.EndedEarly)
			if sum.Ranks != tc.size || sum.Evaluations < 1 {
				t.Fatalf("summary of %d ranks and %d evaluations, want %d ranks and at least one evaluation", sum.Ranks, sum.Evaluations, tc.size)
			}
			_, rounds, _, err := metrics.LoadRun(out)
			if err != nil || len(rounds) < 12*tc.size {
				t.Fatalf("LoadRun: %d records, %v", len(rounds), err)
			}
		})
	}
}

// TestShardBatchesSeek: seeking the default workload's batches to step n gives the batch that
// n calls of Next would have reached, across epoch ends (partial last batches included).
func TestShardBatchesSeek(t *testing.T) {
	const n = 23
	ds := &data.Dataset{Images: make([]float32, n*data.ImageSize), Labels: make([]uint8, n), N: n}
	for i := range n {
		ds.Labels[i] = uint8(i % 10)
		ds.Images[i*data.ImageSize] = float32(i)
	}
	for _, batch := range []int{1, 4, 7, 23, 30} {
		shard, err := data.NewShard(ds, data.ShardConfig{Split: data.SplitIID, Rank: 1, Size: 2, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		newIt := func() *shardBatches {
			it, err := shard.Batches(batch)
			if err != nil {
				t.Fatal(err)
			}
			return &shardBatches{it: it}
		}
		seq := newIt()
		for steps := range uint64(40) {
			sought := newIt()
			if err := sought.SeekSteps(steps); err != nil {
				t.Fatal(err)
			}
			want, _, _ := seq.Next()
			got, _, _ := sought.Next()
			if !slices.Equal(got, want) {
				t.Fatalf("batch %d, step %d: seeking gives another batch than stepping", batch, steps)
			}
		}
	}
}
