package trainer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// jobOutcome is what an in-process job of the synthetic problem produced.
type jobOutcome struct {
	results []*Result
	all     []metrics.RoundRecord  // gathered on rank 0
	hashes  map[int]map[int]uint64 // round → rank → hash of Params after the round
	params  [][]float32            // final Params per rank
	losses  map[int][]float64      // rank → loss per round (global loss where known)
	mu      sync.Mutex
}

// checkReplicasAgree fails the test unless, after every round, all size ranks reported the
// same model hash.
func (o *jobOutcome) checkReplicasAgree(t *testing.T, size int) {
	t.Helper()
	for round, byRank := range o.hashes {
		if len(byRank) != size {
			t.Fatalf("round %d: %d ranks reported", round, len(byRank))
		}
		for r, h := range byRank {
			if h != byRank[0] {
				t.Fatalf("round %d: rank %d's model differs from rank 0's", round, r)
			}
		}
	}
}

// checkLossFell fails the test unless rank 0's mean loss over the last 5 rounds is below 0.7×
// that over the first 5.
func (o *jobOutcome) checkLossFell(t *testing.T) {
	t.Helper()
	l := o.losses[0]
	first, last := mean(l[:5]), mean(l[len(l)-5:])
	if !(last < 0.7*first) {
		t.Errorf("global training loss did not fall: first rounds %.4f, last rounds %.4f", first, last)
	}
}

func paramsHash(p []float32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, v := range p {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	return h.Sum64()
}

// runSynthJob trains the synthetic problem on size in-process ranks; each tweak sees every
// rank's options before it runs.
func runSynthJob(t *testing.T, cfg Config, size int, tweaks ...func(rank int, o *TrainOptions)) *jobOutcome {
	t.Helper()
	return runSynthJobOn(t, cfg, transport.NewMemJob(size), tweaks...)
}

// runSynthJobOn runs the synthetic job on the given endpoints (one per rank) and closes them.
func runSynthJobOn(t *testing.T, cfg Config, eps []transport.Endpoint, tweaks ...func(rank int, o *TrainOptions)) *jobOutcome {
	t.Helper()
	size := len(eps)
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	train := newSynthSet(1200, 1)
	test := newSynthSet(600, 2)
	out := &jobOutcome{
		results: make([]*Result, size), params: make([][]float32, size),
		hashes: map[int]map[int]uint64{}, losses: map[int][]float64{},
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				w, err := newSynthWorker(&cfg, ep, train, r, size)
				if err != nil {
					return err
				}
				strat, err := NewStrategy(&cfg)
				if err != nil {
					return err
				}
				opts := TrainOptions{TrainSize: len(train.y), AfterRound: func(rec *metrics.RoundRecord) {
					h := paramsHash(w.Params)
					out.mu.Lock()
					defer out.mu.Unlock()
					if out.hashes[rec.Round] == nil {
						out.hashes[rec.Round] = map[int]uint64{}
					}
					out.hashes[rec.Round][w.Rank] = h
					l := rec.Loss
					for _, f := range rec.Extra {
						if f.Key == "global_loss" {
							l = f.Value
						}
					}
					out.losses[w.Rank] = append(out.losses[w.Rank], l)
				}}
				if r == 0 {
					opts.Eval = synthEval(test)
				}
				for _, tweak := range tweaks {
					tweak(r, &opts)
				}
				res, err := Run(ctx, w, strat, opts)
				if err != nil {
					return err
				}
				all, err := GatherRecords(ctx, ep, res.Records)
				if err != nil {
					return err
				}
				out.results[r] = res
				out.params[r] = append([]float32(nil), w.Params...)
				if r == 0 {
					out.all = all
				}
				return nil
			}()
			if errs[r] != nil {
				cancel() // let the other ranks fail fast instead of waiting for this one
			}
		}()
	}
	wg.Wait()
	transport.CloseAll(eps)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// TestSSGDReplicasIdenticalAndLossDecreases checks the two properties of SSGD: every rank
// holds bitwise the same model after every round, and the training loss falls.
func TestSSGDReplicasIdenticalAndLossDecreases(t *testing.T) {
	cases := []struct {
		size      int
		coll      string
		reduction string
		momentum  float64
	}{
		{1, "ring", "mean", 0},
		{2, "butterfly", "sum", 0},
		{3, "ring", "mean", 0.9},
		{4, "ring", "mean", 0.5},
		{5, "binary-blocks", "mean", 0},
	}
	for _, tc := range cases {
		t.Run(tc.coll+"_p"+string(rune('0'+tc.size)), func(t *testing.T) {
			cfg := Config{Strategy: "ssgd", Collective: tc.coll, Batch: 8, LR: 0.2, Momentum: tc.momentum,
				GradReduction: tc.reduction, MaxRounds: 40, Seed: 3, Eval: EvalEvery{Rounds: 10}}
			if tc.reduction == "sum" {
				cfg.LR = 0.2 / 8
			}
			out := runSynthJob(t, cfg, tc.size)
			for r, res := range out.results {
				if len(res.Records) != 40 {
					t.Errorf("rank %d ran %d rounds, want 40", r, len(res.Records))
				}
			}
			out.checkReplicasAgree(t, tc.size)
			out.checkLossFell(t)
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85 on the synthetic blobs", acc)
			}
			if len(out.all) != 40*tc.size {
				t.Errorf("rank 0 gathered %d records, want %d", len(out.all), 40*tc.size)
			}
		})
	}
}

// TestASGDConverges checks asynchronous SGD through the parameter server.
func TestASGDConverges(t *testing.T) {
	for _, servers := range []int{0, 1, 3} {
		t.Run("servers"+string(rune('0'+servers)), func(t *testing.T) {
			cfg := Config{Strategy: "asgd", Batch: 8, LR: 0.1, MaxRounds: 60, Seed: 5, Eval: EvalEvery{Rounds: 15}, Options: &ASGDOptions{PSPlacement{PSServers: servers}}}
			out := runSynthJob(t, cfg, 4)
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85", acc)
			}
			total := 0
			for _, res := range out.results {
				total += len(res.Records)
			}
			if total < 4*60 {
				t.Errorf("%d worker steps in all, want ≥ %d (max rounds counts server updates per rank)", total, 4*60)
			}
			sawStale := false
			for _, rec := range out.all {
				for _, f := range rec.Extra {
					sawStale = sawStale || f.Key == "staleness"
				}
			}
			if !sawStale {
				t.Log("no push was stale in this run (possible, but unusual with 4 concurrent workers)")
			}
		})
	}
}

// TestStopOnTargetAccuracy checks that rank 0's target-accuracy stop reaches every rank
// (no rank hangs in a collective or on the server) for each strategy.
func TestStopOnTargetAccuracy(t *testing.T) {
	for _, strat := range []string{"ssgd", "asgd", "local"} {
		t.Run(strat, func(t *testing.T) {
			cfg := Config{Strategy: strat, Collective: "ring", Batch: 8, LR: 0.2, TargetAcc: 0.8,
				MaxRounds: 100000, Seed: 9, Eval: EvalEvery{Rounds: 1}}
			if strat == "asgd" {
				cfg.Collective = "ps"
			}
			out := runSynthJob(t, cfg, 3)
			res := out.results[0]
			if !strings.Contains(res.StopReason, "target accuracy") {
				t.Fatalf("stop reason %q, want the target accuracy", res.StopReason)
			}
			if len(res.Records) > 20000 {
				t.Errorf("rank 0 ran %d rounds before stopping on an easy target", len(res.Records))
			}
			if strat == "ssgd" {
				for r, other := range out.results {
					if len(other.Records) != len(res.Records) {
						t.Errorf("rank %d stopped after %d rounds, rank 0 after %d", r, len(other.Records), len(res.Records))
					}
				}
			}
		})
	}
}

// TestStopWhenFailed checks that an error from rank 0's Failed (its run directory could not
// take a record) stops every rank after the round it was seen before, with the error as the
// stop reason, for each kind of stop agreement (in the round's collective, on the parameter
// server, on the control channel), whatever the job's size.
func TestStopWhenFailed(t *testing.T) {
	const failAt = 4 // the Failed call that errs: before round failAt-1
	for _, strat := range []string{"ssgd", "asgd", "local"} {
		for _, size := range []int{1, 2, 3, 5} {
			if strat == "asgd" && size == 1 {
				continue // a parameter server needs a worker besides itself
			}
			t.Run(fmt.Sprintf("%s/%d", strat, size), func(t *testing.T) {
				cfg := Config{Strategy: strat, Collective: "ring", Batch: 8, LR: 0.2, MaxRounds: 100000, Seed: 9}
				if strat == "asgd" {
					cfg.Collective = "ps"
				}
				calls := 0
				out := runSynthJob(t, cfg, size, func(r int, o *TrainOptions) {
					if r == 0 {
						o.Failed = func() error {
							if calls++; calls >= failAt {
								return errors.New("disk full")
							}
							return nil
						}
					}
				})
				res := out.results[0]
				if res.StopReason != "stopped: disk full" {
					t.Errorf("stop reason %q, want Failed's error", res.StopReason)
				}
				if strat == "asgd" {
					// a worker stops after its next request once the server has the vote
					if n := len(res.Records); n < failAt || n > failAt+size {
						t.Errorf("rank 0 ran %d rounds, want %d to %d", n, failAt, failAt+size)
					}
					return
				}
				for r, other := range out.results {
					// local's other ranks run at their own pace until the vote reaches them
					if n := len(other.Records); n != failAt && (strat != "local" || r == 0) {
						t.Errorf("rank %d ran %d rounds, want %d", r, n, failAt)
					}
				}
			})
		}
	}
}

func TestUnknownStrategyListsKnown(t *testing.T) {
	cfg := Config{Strategy: "bogus"}
	cfg.Defaults()
	err := Builtin().Validate(&cfg, 2)
	if err == nil || !strings.Contains(err.Error(), "known: "+strings.Join(Strategies(), ", ")) {
		t.Fatalf("err = %v, want one listing the known strategies", err)
	}
	for _, name := range []string{"asgd", "dcasgd", "esync", "local", "ssgd", "ssp", "sync-switch", "wbsp", "wbsp-opt"} {
		if !slices.Contains(Strategies(), name) {
			t.Errorf("strategy %q is not registered (have %v)", name, Strategies())
		}
	}
}
