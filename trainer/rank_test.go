package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective/topology"
	"github.com/hetsync/hetsync/trainer/data"
	"github.com/hetsync/hetsync/trainer/metrics"
	"github.com/hetsync/hetsync/transport"
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
		{"asgd", "", ParameterServer, nil},
		{"wbsp", "ps", ParameterServer, nil},
		{"wbsp", "butterfly", "butterfly", nil},
		{"wbsp-opt", "auto", "recursive-doubling", nil},
		{"esync", "hier-ring", "hier-ring", links},
	} {
		strat := tc.strat
		t.Run(strat+"-"+tc.coll, func(t *testing.T) {
			cfg := Config{Strategy: strat, Collective: tc.coll, Batch: 16, Momentum: 0.9, MaxRounds: 30, Eval: EvalEvery{Rounds: 10}}
			cfg.Defaults()
			const size = 2
			eps := transport.NewMemJob(size)
			results := make([]*RankResult, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r, ep := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := RankOptions{DataDir: dir, Threads: 1, EvalBatch: 32, DataPath: "mem", Links: tc.links}
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
			seen := map[int]bool{}
			for _, r := range rounds {
				seen[r.Rank] = true
			}
			if !seen[0] || !seen[1] {
				t.Fatalf("metrics.jsonl lacks a rank: %v", seen)
			}
		})
	}
}
