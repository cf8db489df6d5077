package trainer_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/transport"
)

// sessionForms are the strategies whose step-by-step forms a caller's loop drives beside
// ssgd, esync and wbsp over an allreduce (TestSessionDrivesStrategiesLikeTrain), with the
// Exchange each reports.
var sessionForms = []struct {
	name string
	cfg  trainer.Config
	ex   trainer.Exchange
	// same: on one rank the caller's loop reaches Train's parameters bit for bit (the
	// strategy's rounds do not depend on timing there).
	same bool
}{
	{"asgd", trainer.Config{Strategy: "asgd", Collective: "ps"}, trainer.ExchangeServer, true},
	{"dcasgd", trainer.Config{Strategy: "dcasgd", Collective: "ps"}, trainer.ExchangeServer, true},
	{"ssp", trainer.Config{Strategy: "ssp", Collective: "ps", Options: &trainer.SSPOptions{Staleness: ptr(2)}}, trainer.ExchangeServer, true},
	{"ssp-lazy", trainer.Config{Strategy: "ssp", Collective: "ps", Options: &trainer.SSPOptions{Staleness: ptr(2), Pull: "lazy"}}, trainer.ExchangeParams, true},
	{"local", trainer.Config{Strategy: "local", Collective: "ring"}, trainer.ExchangeParams, true},
	{"sync-switch", trainer.Config{Strategy: "sync-switch", Collective: "ring", Options: &trainer.SyncSwitchConfig{SwitchAt: 0.5, Policy: "none"}}, trainer.ExchangeServer, true},
	{"wbsp-ps", trainer.Config{Strategy: "wbsp", Collective: "ps"}, trainer.ExchangeParams, true},
	{"wbsp-period", trainer.Config{Strategy: "wbsp", Collective: "ring", Options: &trainer.WBSPOptions{Period: 3}}, trainer.ExchangeParams, true},
	{"wbsp-opt-ps", trainer.Config{Strategy: "wbsp-opt", Collective: "ps"}, trainer.ExchangeParams, false},
	{"wbsp-opt", trainer.Config{Strategy: "wbsp-opt", Collective: "ring"}, trainer.ExchangeParams, false},
	{"wbsp-opt-period", trainer.Config{Strategy: "wbsp-opt", Collective: "ring", Options: &trainer.WBSPOptions{Period: 3}}, trainer.ExchangeParams, false},
}

func ptr[T any](v T) *T { return &v }

// rankOptions is cfg with a copy of its options of its own: a rank's configuration fills the
// options' defaults in, and ranks that are goroutines of one test must not share them.
func rankOptions(cfg trainer.Config) trainer.Config {
	if v := reflect.ValueOf(cfg.Options); v.Kind() == reflect.Pointer && !v.IsNil() {
		c := reflect.New(v.Elem().Type())
		c.Elem().Set(v.Elem())
		cfg.Options = c.Interface().(trainer.Options)
	}
	return cfg
}

// TestSessionDrivesEveryStrategy drives every strategy without a test of its own in
// TestSessionDrivesStrategiesLikeTrain from a loop the caller owns (userLoop: its optimizer
// steps where Exchange says, asked before each step) on 3 ranks: every rank reaches the
// agreed stop, the held-out loss of every rank's model (local: rank 0's, the one it
// evaluates) falls below a tenth of the initial one, and the strategies that keep identical replicas (local SGD's periodic averaging,
// sync-switch after its last BSP round) end with them. On one rank, where the rounds do not
// depend on timing, the caller's loop reaches Train's parameters bit for bit: the caller's
// optimizer is Train's under ExchangeParams, and under ExchangeServer the strategy's update
// is the only one.
func TestSessionDrivesEveryStrategy(t *testing.T) {
	const rounds = 60
	held := newRegData(500, 99, -1)
	initial := held.loss(make([]float32, regDim+1))
	for _, tc := range sessionForms {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Batch, cfg.LR, cfg.Momentum, cfg.MaxRounds, cfg.Seed = 7, 0.05, 0.5, rounds, 3
			if cfg.Collective == "ps" && strings.HasPrefix(cfg.Strategy, "wbsp") {
				// WBSP's servers publish on the slowest rank's upload: rank 1 is the
				// slowest, by a step sleep twice the others' (with no sleep at all the
				// fast ranks could reach the bound within a few of its steps).
				cfg.StepSleep = []time.Duration{time.Millisecond, 2 * time.Millisecond, time.Millisecond}
			}
			params, results := userLoop(t, cfg, transport.NewMemJob(3))
			for r, p := range params {
				if r > 0 && tc.cfg.Strategy == "local" {
					// The others train alone until rank 0's stop reaches them: as many
					// steps as the host's scheduler gave them.
					continue
				}
				if loss := held.loss(p); !(loss < initial/10) {
					t.Errorf("rank %d: held-out loss %.4f after training, initial %.4f: want it below a tenth", r, loss, initial)
				}
				if len(results[r].Records) == 0 {
					t.Errorf("rank %d ran no round", r) // userLoop returns when every rank's Sync reported the stop
				}
			}
			if strings.Contains(tc.name, "period") {
				for r := 1; r < len(params); r++ {
					if !slices.Equal(params[r], params[0]) {
						t.Errorf("local SGD: rank %d's average differs from rank 0's", r)
					}
				}
			}
			if !tc.same {
				return
			}
			cfg.StepSleep = nil
			one, _ := userLoop(t, cfg, transport.NewMemJob(1))
			models, _ := trainRegression(t, cfg, 1, nil)
			if !slices.Equal(one[0], models[0].Params()) {
				t.Errorf("on one rank the caller's loop reached %v, Train %v", one[0], models[0].Params())
			}
		})
	}
}

// TestSessionExchange: each session reports its strategy's Exchange, and only wbsp-opt over an
// allreduce asks for the parameters at every step.
func TestSessionExchange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range sessionForms {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Batch, cfg.LR, cfg.MaxRounds = 7, 0.05, 10
			ep := transport.NewMemJob(1)[0]
			defer ep.Close()
			sess, err := trainer.NewSession(ctx, ep, cfg, make([]float32, regDim+1), nil, trainer.TrainOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close(ctx)
			if got := sess.Exchange(); got != tc.ex {
				t.Errorf("Exchange() = %v, want %v", got, tc.ex)
			}
			if want := tc.cfg.Strategy == "wbsp-opt" && tc.cfg.Collective != "ps"; sess.ParamsAtSteps() != want {
				t.Errorf("ParamsAtSteps() = %v, want %v", !want, want)
			}
		})
	}
}

// TestWBSPPeriodOptions: --wbsp-period is refused where it cannot hold, naming the flag.
func TestWBSPPeriodOptions(t *testing.T) {
	for _, tc := range []struct {
		cfg  trainer.Config
		want string
	}{
		{trainer.Config{Strategy: "wbsp", Collective: "ring", Options: &trainer.WBSPOptions{Period: -1}}, "--wbsp-period must be ≥ 0"},
		{trainer.Config{Strategy: "wbsp", Collective: "ps", Options: &trainer.WBSPOptions{Period: 2}}, "--wbsp-period 2 needs an allreduce"},
		{trainer.Config{Strategy: "wbsp-opt", Collective: "ring", Options: &trainer.WBSPOptions{Period: 2, SlowRank: ptr(0)}}, "--wbsp-period (every rank averages after N steps) or --wbsp-slow-rank"},
	} {
		t.Run(fmt.Sprintf("%s-%s", tc.cfg.Strategy, tc.cfg.Collective), func(t *testing.T) {
			cfg := tc.cfg
			cfg.Batch, cfg.LR, cfg.MaxRounds = 7, 0.05, 10
			if err := trainer.Builtin().Validate(&cfg, 2); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestWBSPPeriodIsLocalSGD: WBSP with --wbsp-period 3 trains what periodic model averaging
// every 3 steps (local SGD, a program's own strategy here) trains, up to float rounding: the
// round's w_t + ΣΔ/N is the ranks' mean model.
func TestWBSPPeriodIsLocalSGD(t *testing.T) {
	const size = 3
	base := trainer.Config{Collective: "ring", Batch: 7, LR: 0.05, Momentum: 0.5, MaxRounds: 20, Seed: 3}
	wbsp := base
	wbsp.Strategy, wbsp.Options = "wbsp", &trainer.WBSPOptions{Period: 3}
	avg := base
	avg.Strategy, avg.Options = "periodic-avg", &avgOptions{Every: 3}
	got, _ := trainRegression(t, wbsp, size, nil)
	want, _ := trainRegression(t, avg, size, withPeriodicAvg(t))
	for r := range size {
		for i, p := range got[r].Params() {
			if q := want[r].Params()[i]; math.Abs(float64(p-q)) > 1e-5 {
				t.Fatalf("rank %d, parameter %d: wbsp --wbsp-period 3 reached %v, periodic averaging %v", r, i, p, q)
			}
		}
	}
}
