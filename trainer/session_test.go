package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// userLoop trains the regression with a loop the test owns, through a Session on each rank:
// its own batches (regModel.Step on the session's vectors), its own optimizer (trainer.SGD at
// the rates Train's would use), and the strategy's answers on when to synchronize. It returns
// every rank's parameters and result. Each rank runs on its endpoint of eps.
func userLoop(t *testing.T, cfg trainer.Config, eps []transport.Endpoint) ([][]float32, []*trainer.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	size := len(eps)
	params := make([][]float32, size)
	results := make([]*trainer.Result, size)
	errs := make([]error, size)
	done := make(chan struct{}, size)
	for r := range size {
		m := &regModel{data: newRegData(203, cfg.Seed, r), batch: 7, params: make([]float32, regDim+1)}
		params[r] = m.params
		go func() {
			defer func() { _ = eps[r].Close(); done <- struct{}{} }()
			results[r], errs[r] = driveSession(ctx, eps[r], rankOptions(cfg), m)
			if errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				cancel() // the other ranks would wait for this one
			}
		}()
	}
	for range size {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return params, results
}

// driveSession is one rank's loop: step, report, ask, synchronize, until the agreed stop.
func driveSession(ctx context.Context, ep transport.Endpoint, cfg trainer.Config, m *regModel) (*trainer.Result, error) {
	sess, err := trainer.NewSession(ctx, ep, cfg, m.params, nil, trainer.TrainOptions{})
	if err != nil {
		return nil, err
	}
	// The optimizer Train's worker would step: the job's for ssgd and wbsp, the local one for
	// esync (its defaults are the job's rate and momentum).
	opt := &trainer.SGD{LR: float32(cfg.LR), Momentum: float32(cfg.Momentum), WeightDecay: float32(cfg.WeightDecay)}
	for {
		t0 := time.Now()
		r, err := m.Step(ctx, sess.Grads())
		if err != nil {
			return nil, err
		}
		if sess.Exchange() == trainer.ExchangeParams {
			opt.Step(sess.Params(), sess.Grads(), 1)
		}
		if err := sess.Step(ctx, trainer.StepReport{Loss: r.Loss, Samples: r.Samples, Duration: time.Since(t0)}); err != nil {
			return nil, err
		}
		sync, err := sess.ShouldSync(ctx)
		if err != nil {
			return nil, err
		}
		if !sync {
			continue
		}
		st, err := sess.Sync(ctx)
		if err != nil {
			return nil, err
		}
		if sess.Exchange() == trainer.ExchangeGradients {
			opt.Step(sess.Params(), sess.Grads(), 1)
		}
		if st.Stop {
			return sess.Close(ctx)
		}
	}
}

// TestSessionDrivesStrategiesLikeTrain drives ssgd, esync and wbsp (over an allreduce) from a
// loop the caller owns on 1 to 5 ranks: their replicas stay bitwise identical, as under Train,
// every rank stops after the same round, and where the rounds are deterministic (ssgd; esync
// on one rank, which is always its own slowest; wbsp on one rank pinned as its trigger) the
// parameters are Train's, bit for bit.
func TestSessionDrivesStrategiesLikeTrain(t *testing.T) {
	const rounds = 40
	for _, strategy := range []string{"ssgd", "esync", "wbsp"} {
		for size := 1; size <= 5; size++ {
			t.Run(fmt.Sprintf("%s/%d-ranks", strategy, size), func(t *testing.T) {
				cfg := trainer.Config{Strategy: strategy, Collective: "ring", Batch: 7, LR: 0.05, Momentum: 0.5, MaxRounds: rounds, Seed: 3}
				if strategy == "wbsp" && size == 1 {
					// Pinned, the one rank triggers every round with its step; elected, the
					// first round's barrier may complete after a step or after several.
					zero := 0
					cfg.Options = &trainer.WBSPOptions{SlowRank: &zero}
				}
				params, results := userLoop(t, cfg, transport.NewMemJob(size))
				for r := range size {
					if res := results[r]; len(res.Records) != rounds || res.Records[rounds-1].Round != rounds-1 {
						t.Fatalf("rank %d ran %d rounds, want %d", r, len(res.Records), rounds)
					}
					if r > 0 && !slices.Equal(params[r], params[0]) {
						t.Errorf("rank %d's parameters differ from rank 0's: %v vs %v", r, params[r], params[0])
					}
				}
				if results[0].StopReason == "" || results[0].Collective != "ring" {
					t.Errorf("rank 0's result says it stopped for %q over %q, want the round bound over ring", results[0].StopReason, results[0].Collective)
				}
				models, res := trainRegression(t, cfg, size, nil)
				if len(res.Records) != rounds {
					t.Fatalf("Train ran %d rounds, want %d", len(res.Records), rounds)
				}
				if strategy == "ssgd" || size == 1 {
					if !slices.Equal(params[0], models[0].Params()) {
						t.Errorf("the caller's loop reached %v, Train %v", params[0], models[0].Params())
					}
				}
			})
		}
	}
}

// TestSessionRefusals: a program's strategy without a step-by-step form, ESync's non-blocking queries,
// the heterogeneity injected into Train's steps, the options of Train's own loop and those of
// the run directory (NewRunSession's) are refused, each naming why.
func TestSessionRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		cfg  trainer.Config
		opts trainer.TrainOptions
		want string
	}{
		{"not-stepped", trainer.Config{Strategy: "periodic-avg", Options: &avgOptions{Every: 2}}, trainer.TrainOptions{Strategies: withPeriodicAvg(t)}, "--sync periodic-avg cannot be driven by a caller's loop: it has no step-by-step form"},
		{"nonblocking", trainer.Config{Strategy: "esync", Collective: "ring", Options: &trainer.ESyncConfig{Queries: trainer.ESyncNonBlocking}}, trainer.TrainOptions{}, "--esync-queries nonblocking cannot be driven"},
		{"compute-stragglers", trainer.Config{Strategy: "ssgd", Stragglers: computeStragglers(t)}, trainer.TrainOptions{}, "rank 0: Config.Stragglers (compute mode) delays Train's batch fetches"},
		{"eval", trainer.Config{Strategy: "ssgd"}, trainer.TrainOptions{Eval: func(context.Context, []float32) (float64, float64, error) { return 0, 0, nil }}, "TrainOptions.Eval belongs to Train's loop"},
		{"run-directory", trainer.Config{Strategy: "ssgd"}, trainer.TrainOptions{Out: "run"}, "TrainOptions.Out is the run directory's, which a session does not write: use NewRunSession"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Batch, cfg.LR, cfg.MaxRounds = 7, 0.05, 10
			ep := transport.NewMemJob(1)[0]
			defer ep.Close()
			sess, err := trainer.NewSession(ctx, ep, cfg, make([]float32, regDim+1), nil, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if sess != nil {
					_, _ = sess.Close(ctx)
				}
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
}

func computeStragglers(t *testing.T) trainer.StragglerConfig {
	s, err := trainer.ParseStragglers("ranks=0;delay=30ms;at=1s;for=1s;mode=compute")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSessionSlowdown: a rank given a slowdown sleeps in Step what Train would after its own
// step, and the round counts the sleep as compute: at factor 3 over a 20 ms base, each of the
// caller's near-instant steps takes at least 60 ms.
func TestSessionSlowdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := trainer.Config{Strategy: "ssgd", Batch: 7, LR: 0.05, MaxRounds: 3,
		Slowdown: []float64{3}, SlowdownBase: 20 * time.Millisecond}
	ep := transport.NewMemJob(1)[0]
	defer ep.Close()
	sess, err := trainer.NewSession(ctx, ep, cfg, make([]float32, regDim+1), nil, trainer.TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	for round := 0; round < 3; round++ {
		if err := sess.Step(ctx, trainer.StepReport{Samples: 7, Duration: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		st, err := sess.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Compute < 60*time.Millisecond {
			t.Fatalf("round %d: compute %v, want at least 3 × 20ms", round, st.Compute)
		}
	}
}

// TestSessionOverLibp2p drives esync and wbsp from the caller's loop over real libp2p hosts on
// loopback: every rank ends after the same round with bitwise-identical parameters.
func TestSessionOverLibp2p(t *testing.T) {
	const size, rounds = 3, 25
	for _, strategy := range []string{"esync", "wbsp"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := trainer.Config{Strategy: strategy, Collective: "ring", Batch: 7, LR: 0.05, MaxRounds: rounds, Seed: 3}
			eps := p2ptest.JoinLoopback(t, size, p2p.Config{Secret: "session-p2p-test", Security: "tls", DataPath: "tcp"}, nil)
			params, results := userLoop(t, cfg, eps)
			for r := range size {
				if n := len(results[r].Records); n != rounds {
					t.Errorf("rank %d ran %d rounds, want %d", r, n, rounds)
				}
				if r > 0 && !slices.Equal(params[r], params[0]) {
					t.Errorf("rank %d's parameters differ from rank 0's: %v vs %v", r, params[r], params[0])
				}
			}
		})
	}
}
