package trainer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// capturedJob is an in-process job of the synthetic problem with every rank's model after
// every round, its records and its strategy kept for inspection.
type capturedJob struct {
	params  [][][]float32 // rank → round → Params after the round
	records [][]metrics.RoundRecord
	strats  []Strategy
	results []*Result
}

// runCapturedJob trains cfg on size in-process ranks; wrap, when set, decorates each endpoint,
// and setup adjusts each rank's worker before training (its clock, its batches).
func runCapturedJob(t *testing.T, cfg Config, size int, wrap func(transport.Endpoint) transport.Endpoint, setup ...func(w *Worker)) *capturedJob {
	t.Helper()
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, size); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	train := newSynthSet(1200, 1)
	test := newSynthSet(600, 2)
	eps := transport.NewMemJob(size)
	out := &capturedJob{params: make([][][]float32, size), records: make([][]metrics.RoundRecord, size),
		strats: make([]Strategy, size), results: make([]*Result, size)}
	if wrap != nil {
		for r := range eps {
			eps[r] = wrap(eps[r])
		}
	}
	runRanks(t, eps, cancel, func(r int, ep transport.Endpoint) error {
		w, err := newSynthWorker(&cfg, ep, train, r, size)
		if err != nil {
			return err
		}
		for _, f := range setup {
			f(w)
		}
		strat, err := NewStrategy(&cfg)
		if err != nil {
			return err
		}
		out.strats[r] = strat
		opts := TrainOptions{TrainSize: len(train.y), AfterRound: func(rec *metrics.RoundRecord) {
			out.params[r] = append(out.params[r], append([]float32(nil), w.Params...))
		}}
		if r == 0 {
			opts.Eval = synthEval(test)
		}
		res, err := Run(ctx, w, strat, opts)
		if err != nil {
			return err
		}
		out.records[r], out.results[r] = res.Records, res
		return nil
	})
	return out
}

func globalLoss(rec metrics.RoundRecord) float64 {
	for _, f := range rec.Extra {
		if f.Key == "global_loss" {
			return f.Value
		}
	}
	return math.NaN()
}

// TestESyncReplicasIdenticalFastRanksStepMore runs ESync over each collective with one slow
// rank: after every round all ranks hold bitwise the same model, the training loss falls, and
// the fast ranks take more local steps than the slow one.
func TestESyncReplicasIdenticalFastRanksStepMore(t *testing.T) {
	for _, coll := range []string{"ring", "butterfly", "binary-blocks", "ps"} {
		t.Run(coll, func(t *testing.T) {
			const size, rounds = 3, 25
			cfg := Config{Strategy: "esync", Collective: coll, Batch: 8, LR: 0.05, MaxRounds: rounds, Seed: 4,
				Eval: EvalEvery{Rounds: 5}, StepSleep: []time.Duration{0, 0, 4 * time.Millisecond}}
			out := runCapturedJob(t, cfg, size, nil)
			for r := range size {
				if len(out.params[r]) != rounds {
					t.Fatalf("rank %d ran %d rounds, want %d", r, len(out.params[r]), rounds)
				}
			}
			for round := range rounds {
				for r := 1; r < size; r++ {
					if paramsHash(out.params[r][round]) != paramsHash(out.params[0][round]) {
						t.Fatalf("round %d: rank %d's model differs from rank 0's", round, r)
					}
				}
			}
			recs := out.records[0]
			first, last := globalLoss(recs[0]), globalLoss(recs[len(recs)-1])
			if !(last < 0.7*first) {
				t.Errorf("global training loss did not fall: round 0 %.4f, last round %.4f", first, last)
			}
			steps := make([]int, size)
			for r := range size {
				for _, rec := range out.records[r] {
					if rec.LocalSteps < 1 {
						t.Fatalf("rank %d round %d took %d local steps, want ≥ 1", r, rec.Round, rec.LocalSteps)
					}
					steps[r] += rec.LocalSteps
				}
			}
			t.Logf("local steps per rank over %d rounds: %v", rounds, steps)
			if steps[0] <= steps[2] || steps[1] <= steps[2] {
				t.Errorf("local steps per rank %v: the fast ranks 0 and 1 should step more than the slow rank 2", steps)
			}
			if acc := out.results[0].FinalAcc; acc < 0.85 {
				t.Errorf("final accuracy %.3f, want ≥ 0.85", acc)
			}
		})
	}
}

// TestESyncUpdateRule replays every rank's local steps from the recorded global models and
// checks w_{t+1} = w_t + γ·ΣΔ/N, with Δ_i the change of n_i plain SGD steps at rate η from
// w_t on rank i's next n_i batches.
func TestESyncUpdateRule(t *testing.T) {
	for _, mode := range []string{ESyncBlocking, ESyncNonBlocking} {
		t.Run(mode, func(t *testing.T) { testESyncUpdateRule(t, mode) })
	}
}

func testESyncUpdateRule(t *testing.T, mode string) {
	const size, rounds = 3, 12
	const eta, gamma = 0.15, 0.8
	cfg := Config{Strategy: "esync", Collective: "ring", Batch: 8, LR: 0.05, MaxRounds: rounds, Seed: 6,
		Eval: EvalEvery{Rounds: 100}, StepSleep: []time.Duration{0, time.Millisecond, 3 * time.Millisecond},
		Options: &ESyncConfig{LocalLR: eta, GlobalLR: gamma, Queries: mode}}
	out := runCapturedJob(t, cfg, size, nil)
	train := newSynthSet(1200, 1)
	models := make([]*synthModel, size)
	batches := make([]*synthBatches, size)
	for r := range size {
		models[r] = newSynthModel(cfg.Seed)
		batches[r] = &synthBatches{set: train.shard(r, size), batch: cfg.Batch}
	}
	wt := append([]float32(nil), newSynthModel(cfg.Seed).p...)
	sum := make([]float64, len(wt))
	multi := false
	for round := range rounds {
		clear(sum)
		for r := range size {
			m := models[r]
			copy(m.p, wt)
			rec := out.records[r][round]
			n := rec.LocalSteps
			multi = multi || n > 1
			for range n {
				x, y, _ := batches[r].Next()
				if _, _, err := m.ForwardBackward(x, y); err != nil {
					t.Fatal(err)
				}
				for i := range m.p {
					m.p[i] -= float32(eta) * m.g[i]
				}
			}
			// a dropped speculative step took the batch after the round's last
			for range int(recordExtra(rec, "dropped_steps")) {
				batches[r].Next()
			}
			for i := range sum {
				sum[i] += float64(m.p[i] - wt[i])
			}
		}
		got := out.params[0][round]
		for i := range wt {
			want := float64(wt[i]) + gamma*sum[i]/size
			if math.Abs(float64(got[i])-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("round %d, param %d: got %v, want w_t + γ·ΣΔ/N = %v", round, i, got[i], want)
			}
		}
		copy(wt, got)
	}
	if !multi {
		t.Error("no rank took more than one local step: the replay did not exercise n_i > 1")
	}
}

// recordExtra is a round record's strategy-specific field key, 0 when absent.
func recordExtra(rec metrics.RoundRecord, key string) float64 {
	for _, f := range rec.Extra {
		if f.Key == key {
			return f.Value
		}
	}
	return 0
}

func TestParseESyncEpsilon(t *testing.T) {
	tests := []struct {
		in     string
		fixed  time.Duration
		factor float64
		err    bool
	}{
		{"", 0, DefaultESyncEpsilonFactor, false},
		{"auto", 0, DefaultESyncEpsilonFactor, false},
		{"0.25x", 0, 0.25, false},
		{"0.5s", 500 * time.Millisecond, 0, false},
		{"-1s", 0, 0, true},
		{"0x", 0, 0, true},
		{"fast", 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			fixed, factor, err := ParseESyncEpsilon(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err == nil && (fixed != tc.fixed || factor != tc.factor) {
				t.Fatalf("got (%v, %v), want (%v, %v)", fixed, factor, tc.fixed, tc.factor)
			}
		})
	}
}

func TestESyncDefaults(t *testing.T) {
	zero := 0.0
	tests := []struct {
		name     string
		cfg      Config
		localLR  float64
		momentum float64
		factor   float64
	}{
		{"local optimizer follows --lr and --momentum", Config{Strategy: "esync", LR: 0.07, Momentum: 0.9}, 0.07, 0.9, DefaultESyncEpsilonFactor},
		{"explicit plain SGD stays plain", Config{Strategy: "esync", LR: 0.07, Momentum: 0.9, Options: &ESyncConfig{LocalMomentum: &zero, LocalLR: 0.2}}, 0.2, 0, DefaultESyncEpsilonFactor},
		{"a fixed ε needs no factor", Config{Strategy: "esync", Options: &ESyncConfig{Epsilon: 500 * time.Millisecond}}, 0.05, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Defaults()
			if err := Builtin().Configure(&cfg); err != nil {
				t.Fatal(err)
			}
			e := cfg.Options.(*ESyncConfig)
			if e.LocalLR != tc.localLR || e.LocalMomentum == nil || *e.LocalMomentum != tc.momentum || e.GlobalLR != 1 || e.EpsilonFactor != tc.factor {
				t.Fatalf("defaults = %+v (momentum %v), want local lr %v, momentum %v, γ 1, ε factor %v", e, e.LocalMomentum, tc.localLR, tc.momentum, tc.factor)
			}
		})
	}
}

// esyncCounter counts a rank's ESync state-service requests (queries and resets) to rank 0.
type esyncCounter struct {
	transport.Endpoint
	mu      sync.Mutex
	queries map[uint64][]uint32 // round → the k of every query sent in it
	resets  int
}

func (e *esyncCounter) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if m, ok := service.Inspect(esyncServiceName, h); ok {
		e.mu.Lock()
		switch m.Op {
		case esyncQuery:
			e.queries[m.Arg] = append(e.queries[m.Arg], m.Aux)
		case esyncReset:
			if len(payload) != 8 {
				e.mu.Unlock()
				return fmt.Errorf("reset from rank %d carries %d bytes, want the 8 of c", e.Rank(), len(payload))
			}
			e.resets++
		}
		e.mu.Unlock()
	}
	return e.Endpoint.Send(ctx, to, h, payload)
}

// TestESyncResetCarriesFirstQuery checks the wire protocol: the k = 0 query of every round
// after the first rides in the reset, so a rank asks once per local step (k = 1..n_i, the
// last answered READY) and once more (k = 0) only in round 1; every reset carries c.
func TestESyncResetCarriesFirstQuery(t *testing.T) {
	for _, mode := range []string{ESyncBlocking, ESyncNonBlocking} {
		t.Run(mode, func(t *testing.T) { testESyncResetCarriesFirstQuery(t, mode) })
	}
}

// In nonblocking mode a rank asks after each kept step and computes the next one meanwhile:
// it asked k = 1..n_i when the READY answer dropped a step (or waited, as the slowest) and
// k = 1..n_i−1 when the answer came after the step it had started.
func testESyncResetCarriesFirstQuery(t *testing.T, mode string) {
	const size, rounds = 3, 15
	cfg := Config{Strategy: "esync", Collective: "ring", Batch: 8, LR: 0.05, MaxRounds: rounds, Seed: 5,
		Eval: EvalEvery{Rounds: 100}, StepSleep: []time.Duration{0, 0, 6 * time.Millisecond},
		Options: &ESyncConfig{Queries: mode}}
	counters := make([]*esyncCounter, size)
	var mu sync.Mutex
	out := runCapturedJob(t, cfg, size, func(ep transport.Endpoint) transport.Endpoint {
		c := &esyncCounter{Endpoint: ep, queries: map[uint64][]uint32{}}
		mu.Lock()
		counters[ep.Rank()] = c
		mu.Unlock()
		return c
	})
	dropped := 0.0
	for r := 1; r < size; r++ {
		c := counters[r]
		if c.resets != rounds {
			t.Errorf("rank %d sent %d resets, want one per round (%d)", r, c.resets, rounds)
		}
		for i, rec := range out.records[r] {
			round := uint64(i + 1)
			d := recordExtra(rec, "dropped_steps")
			dropped += d
			last := rec.LocalSteps
			if mode == ESyncNonBlocking && d == 0 && len(c.queries[round]) > 0 && int(c.queries[round][len(c.queries[round])-1]) == last-1 {
				last-- // the answer to k = n_i−1 came after step n_i
			}
			var want []uint32
			if round == 1 {
				want = append(want, 0)
			}
			for k := 1; k <= last; k++ {
				want = append(want, uint32(k))
			}
			if got := c.queries[round]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rank %d round %d (%d local steps, %v dropped): queried k = %s, want %s", r, round, rec.LocalSteps, d, brief(got), brief(want))
			}
		}
	}
	if mode == ESyncNonBlocking && dropped == 0 {
		t.Error("no rank dropped a speculative step: the nonblocking mode did not overlap a query with a step")
	}
}

// brief prints a list of k, eliding the middle of a long one.
func brief(ks []uint32) string {
	if len(ks) <= 8 {
		return fmt.Sprint(ks)
	}
	return fmt.Sprintf("%v … %v (%d)", ks[:3], ks[len(ks)-3:], len(ks))
}
