package trainer

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

func TestWBSPNextTrigger(t *testing.T) {
	cases := []struct {
		name     string
		cur, pin int
		times    []float64
		want     int
	}{
		{"first round: the slowest", -1, -1, []float64{1, 3, 2}, 1},
		{"one rank", -1, -1, []float64{5}, 0},
		{"ties go to the lowest rank", -1, -1, []float64{2, 2, 1}, 0},
		{"the current stays within the margin", 2, -1, []float64{1, 3.7, 3}, 2},
		{"a rank past the margin takes over", 2, -1, []float64{1, 3.8, 3}, 1},
		{"the current trigger sped up", 0, -1, []float64{0.001, 0.001, 0.004, 0.001, 0.001}, 2},
		{"pinned whatever the times", 0, 3, []float64{9, 1, 1, 1}, 3},
		{"a current out of range is replaced", 7, -1, []float64{1, 2}, 1},
	}
	for _, tc := range cases {
		if got := wbspNextTrigger(tc.cur, tc.pin, tc.times); got != tc.want {
			t.Errorf("%s: wbspNextTrigger(%d, %d, %v) = %d, want %d", tc.name, tc.cur, tc.pin, tc.times, got, tc.want)
		}
	}
}

// slowSwitchModel is the synthetic model with one slow rank that changes mid-run: rank
// size−1 until the job's phase turns, then rank 0. The fast ranks sleep a tenth of sleep per
// step; the slow rank sleeps sleep, or slowFactor times what the fast ranks' steps take now
// when that is longer: a loaded host stretches every step, and a slow rank slower by a fixed
// time could then look no slower than a fast rank whose step was descheduled. It also sums
// every step's change as plain SGD makes it (−lr·g), so that a test can check that every
// step reached the global model exactly once.
type slowSwitchModel struct {
	Model
	rank, size int
	phase      *atomic.Int32
	sleep      time.Duration
	// fastStep is a moving average of the fast ranks' step times (ns), shared by the job.
	fastStep *atomic.Int64
	lr       float64
	steps    int
	moved    []float64 // Σ −lr·g over this rank's steps
}

// slowFactor is how many times longer than the fast ranks' steps the slow rank's are at least.
const slowFactor = 10

func (m *slowSwitchModel) Step(ctx context.Context, grad []float32) (StepResult, error) {
	start := time.Now()
	r, err := m.Model.Step(ctx, grad)
	if err != nil {
		return r, err
	}
	m.steps++
	for i, g := range grad {
		m.moved[i] -= m.lr * float64(g)
	}
	slow := m.size - 1
	if m.phase.Load() > 0 {
		slow = 0
	}
	switch {
	case m.rank == slow && m.size > 1:
		time.Sleep(max(m.sleep, slowFactor*time.Duration(m.fastStep.Load())))
	default:
		// the fast ranks step ten times as often, not thousands of times: the goroutines of
		// five ranks share two cores here
		time.Sleep(m.sleep / 10)
		m.observeFastStep(time.Since(start))
	}
	return r, nil
}

// observeFastStep moves the fast ranks' average step time an eighth of the way to d.
func (m *slowSwitchModel) observeFastStep(d time.Duration) {
	for {
		old := m.fastStep.Load()
		avg := int64(d)
		if old > 0 {
			avg = old + (int64(d)-old)/8
		}
		if m.fastStep.CompareAndSwap(old, avg) {
			return
		}
	}
}

// wbspAllReduceJob is what a run of an allreduce form of WBSP left on each rank.
type wbspAllReduceJob struct {
	records [][]metrics.RoundRecord
	bases   [][]uint64 // hash of w_t after each round
	final   [][]float32
	models  []*slowSwitchModel
	inits   [][]float32
}

// runWBSPAllReduce runs cfg on size in-process ranks with the slow rank switching from size−1
// to 0 after switchAt rounds (the slow rank sleeping slow per step, or slowFactor times the
// others' steps, the others a tenth of slow), recording the global model after every round.
func runWBSPAllReduce(t *testing.T, cfg Config, size, switchAt int, slow time.Duration) *wbspAllReduceJob {
	t.Helper()
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	train := newSynthSet(1200, 1)
	var phase atomic.Int32
	var fastStep atomic.Int64
	out := &wbspAllReduceJob{records: make([][]metrics.RoundRecord, size), bases: make([][]uint64, size),
		final: make([][]float32, size), models: make([]*slowSwitchModel, size), inits: make([][]float32, size)}
	runRanks(t, transport.NewMemJob(size), cancel, func(r int, ep transport.Endpoint) error {
		w, err := newSynthWorker(&cfg, ep, train, r, size)
		if err != nil {
			return err
		}
		m := &slowSwitchModel{Model: w.Model, rank: r, size: size, phase: &phase, sleep: slow, fastStep: &fastStep,
			lr: cfg.LR, moved: make([]float64, len(w.Params))}
		w.Model, out.models[r] = m, m
		out.inits[r] = append([]float32(nil), w.Params...)
		strat, err := NewStrategy(&cfg)
		if err != nil {
			return err
		}
		var base *[]float32
		switch s := strat.(type) {
		case *wbspAllReduce:
			base = &s.base
		case *wbspOptAllReduce:
			base = &s.base
		default:
			return fmt.Errorf("--sync %s --collective %s built %T, not an allreduce form", cfg.Strategy, cfg.Collective, strat)
		}
		opts := TrainOptions{TrainSize: len(train.y), AfterRound: func(rec *metrics.RoundRecord) {
			out.bases[r] = append(out.bases[r], paramsHash(*base))
			if r == 0 && rec.Round+1 == switchAt {
				phase.Store(1)
			}
		}}
		res, err := Run(ctx, w, strat, opts)
		if err != nil {
			return err
		}
		out.records[r], out.final[r] = res.Records, append([]float32(nil), w.Params...)
		return nil
	})
	return out
}

// TestWBSPAllReduceCountsEveryStepOnce runs wbsp and wbsp-opt over each allreduce collective at
// 1 to 5 ranks, with a slow rank that changes mid-run: after every round the global models
// are bitwise identical on all ranks, the run ends with identical replicas, every rank's every
// step is in the final model exactly once (initial + Σ of all steps' changes / N), and the
// trigger follows the slow rank.
func TestWBSPAllReduceCountsEveryStepOnce(t *testing.T) {
	const rounds, switchAt = 16, 6
	for _, strat := range []string{"wbsp", "wbsp-opt"} {
		for _, coll := range []string{"ring", "butterfly", "binary-blocks", "auto"} {
			for size := 1; size <= 5; size++ {
				t.Run(fmt.Sprintf("%s/%s/%d", strat, coll, size), func(t *testing.T) {
					cfg := Config{Strategy: strat, Collective: coll, Batch: 8, LR: 0.1, Momentum: 0, MaxRounds: rounds, Seed: 3,
						Eval: EvalEvery{Rounds: 1000}}
					// Which rank triggers follows measured step times, which a loaded host
					// blurs at a 5 ms step: the ring runs check it with slow steps of 40 ms
					// at least (slowFactor times the fast ranks' on a loaded host), the rest
					// check what does not depend on a clock.
					follow := coll == "ring"
					slow := 5 * time.Millisecond
					if follow {
						slow = 40 * time.Millisecond
					}
					job := runWBSPAllReduce(t, cfg, size, switchAt, slow)
					checkWBSPAllReduceJob(t, job, size, switchAt, follow)
				})
			}
		}
	}
}

func checkWBSPAllReduceJob(t *testing.T, job *wbspAllReduceJob, size, switchAt int, follow bool) {
	t.Helper()
	n := len(job.records[0])
	for r := range size {
		if len(job.records[r]) != n {
			t.Fatalf("rank %d ran %d rounds, rank 0 %d: the ranks must stop after the same round", r, len(job.records[r]), n)
		}
		steps := 0
		for _, rec := range job.records[r] {
			if rec.LocalSteps < 1 {
				t.Fatalf("rank %d round %d: %d local steps, want ≥ 1", r, rec.Round, rec.LocalSteps)
			}
			steps += rec.LocalSteps
		}
		if steps != job.models[r].steps {
			t.Errorf("rank %d: its rounds record %d steps, the model took %d", r, steps, job.models[r].steps)
		}
	}
	for round := range n {
		for r := 1; r < size; r++ {
			if job.bases[r][round] != job.bases[0][round] {
				t.Fatalf("round %d: rank %d's global model differs from rank 0's", round, r)
			}
		}
	}
	for r := 1; r < size; r++ {
		if paramsHash(job.final[r]) != paramsHash(job.final[0]) {
			t.Fatalf("rank %d's final model differs from rank 0's", r)
		}
	}
	worst, at := 0.0, 0
	for i, got := range job.final[0] {
		want := float64(job.inits[0][i])
		for _, m := range job.models {
			want += m.moved[i] / float64(size)
		}
		if d := math.Abs(float64(got) - want); d > worst {
			worst, at = d, i
		}
	}
	// float32 sums of a few thousand steps against float64 ones; a step lost or counted
	// twice moves some parameter by lr·|g|/N, orders of magnitude more.
	if worst > 2e-4 {
		t.Errorf("final w[%d] is %.3g away from initial + Σ of every step's change / N (%d rounds)", at, worst, n)
	}
	if follow && size > 1 {
		// Step times are a noisy measurement on a busy host (a descheduled fast step looks
		// slow): the trigger must be the first slow rank at some round before the switch and
		// rank 0 at most rounds once the averages have had two rounds to follow.
		trigger := func(rec metrics.RoundRecord) float64 {
			for _, f := range rec.Extra {
				if f.Key == "next_trigger" {
					return f.Value
				}
			}
			return -1
		}
		before, after, late := false, 0, 0
		var seq []float64
		for i, rec := range job.records[0] {
			before = before || (i < switchAt && trigger(rec) == float64(size-1))
			if i >= switchAt+2 {
				late++
				if trigger(rec) == 0 {
					after++
				}
			}
			seq = append(seq, trigger(rec))
		}
		if !before || 2*after < late {
			t.Errorf("trigger ranks by round %v: want %d at some round before round %d and 0 at most rounds from round %d", seq, size-1, switchAt, switchAt+2)
		}
	}
}

func TestWBSPStepTimesAverage(t *testing.T) {
	e := make(wbspStepTimes, 3)
	e.add([]float32{0.002, 0, 0.004})
	e.add([]float32{0.004, 0.001, 0.004})
	want := wbspStepTimes{0.003, 0.001, 0.004}
	for r := range e {
		if math.Abs(e[r]-want[r]) > 1e-9 {
			t.Fatalf("averages %v, want %v", e, want)
		}
	}
	// one slow round of rank 1 does not make it the trigger over rank 2
	e.add([]float32{0.003, 0.009, 0.004})
	if got := wbspNextTrigger(2, -1, e); got != 2 {
		t.Errorf("after one slow round of rank 1, averages %v: trigger %d, want 2", e, got)
	}
}

func TestWBSPSlowRankWaitsForTrigger(t *testing.T) {
	start := time.Unix(100, 0)
	cases := []struct {
		name    string
		rank    int
		trigger int
		times   wbspStepTimes
		elapsed time.Duration
		want    bool
	}{
		{"an equally slow rank whose next step would outlast the trigger's", 2, 0, wbspStepTimes{0.3, 0.03, 0.3}, 50 * time.Millisecond, true},
		{"an equally slow rank at the start of the round steps", 2, 0, wbspStepTimes{0.3, 0.03, 0.3}, 0, false},
		{"a fast rank never waits", 1, 0, wbspStepTimes{0.3, 0.03, 0.3}, 290 * time.Millisecond, false},
		{"a half-speed rank with time for one more step steps", 1, 0, wbspStepTimes{0.3, 0.15, 0.03}, 100 * time.Millisecond, false},
		{"a half-speed rank without it waits", 1, 0, wbspStepTimes{0.3, 0.15, 0.03}, 160 * time.Millisecond, true},
		{"no trigger yet", 1, -1, wbspStepTimes{0.3, 0.3}, time.Second, false},
		{"no estimate yet", 1, 0, wbspStepTimes{0, 0.3}, time.Second, false},
	}
	for _, tc := range cases {
		now := start.Add(tc.elapsed)
		w := &Worker{Rank: tc.rank, Now: func() time.Time { return now }}
		s := &wbspRounds{trigger: tc.trigger, times: tc.times, started: start}
		if got := s.waitsForTrigger(w); got != tc.want {
			t.Errorf("%s: waitsForTrigger = %v, want %v", tc.name, got, tc.want)
		}
	}
}
