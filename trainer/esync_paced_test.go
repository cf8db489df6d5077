package trainer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// pacedConfig is ESync with overlapping rounds paced by their exchanges, on the synthetic
// workload.
func pacedConfig(rounds int) Config {
	cfg := overlapConfig(rounds)
	cfg.Options = &ESyncConfig{Overlap: true, Paced: true}
	return cfg
}

// pacedSleep is a step sleep of 200 µs on each of size ranks: paced ranks step until their
// exchange lands, and steps that yield the CPU leave the exchange's goroutines the cores, so
// that a job of several ranks on a small machine ends in a fraction of a second.
func pacedSleep(size int) []time.Duration {
	d := make([]time.Duration, size)
	for i := range d {
		d[i] = 200 * time.Microsecond
	}
	return d
}

// requireIdentical fails t unless every rank ended with rank 0's model, bit for bit.
func requireIdentical(t *testing.T, out ckptOutcome, what string) {
	t.Helper()
	if out.err != nil {
		t.Fatalf("%s: %v", what, out.err)
	}
	for r := 1; r < len(out.params); r++ {
		if !slices.Equal(out.params[r], out.params[0]) {
			t.Fatalf("%s: rank %d's model differs from rank 0's", what, r)
		}
	}
}

// Paced rounds keep every rank's global model identical on 1 to 5 ranks, with and without the
// outer optimizer and int8 rounds, although each rank's count of local steps in a round
// follows its own exchange's timing; and with checkpoints, which land the exchange in flight.
func TestESyncPacedKeepsReplicasIdentical(t *testing.T) {
	for _, v := range []struct{ outer, compress string }{{"", ""}, {OuterNesterov, ""}, {"", "int8"}, {OuterNesterov, "int8"}} {
		for size := 1; size <= 5; size++ {
			cfg := pacedConfig(5)
			cfg.Outer, cfg.Compress = v.outer, v.compress
			cfg.StepSleep = pacedSleep(size)
			out := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, timeout: 30 * time.Second})
			requireIdentical(t, out, fmt.Sprintf("--outer %q --compress %q on %d ranks", v.outer, v.compress, size))
		}
	}
	cfg := pacedConfig(8)
	cfg.Outer, cfg.Compress = OuterNesterov, "int8"
	cfg.StepSleep = pacedSleep(3)
	out := runCkptJob(t, ckptJob{cfg: cfg, size: 3, cancelAt: -1, timeout: 30 * time.Second,
		opts: CheckpointOptions{Dir: t.TempDir(), Every: EvalEvery{Rounds: 3}}})
	requireIdentical(t, out, "checkpoints every 3 rounds on 3 ranks")
}

// The steps a rank takes while its exchange is in flight are kept: on one rank ESync paced,
// with the plain update (γ = 1), applies every local step once, however many a round holds,
// so it ends where plain SGD over as many steps of the same batches ends, up to float32's
// rounding of the re-basing. Dropping the in-flight steps would lose all but one step a round.
func TestESyncPacedKeepsEveryStep(t *testing.T) {
	cfg := pacedConfig(12)
	cfg.Momentum = 0
	paced := runCkptJob(t, ckptJob{cfg: cfg, size: 1, cancelAt: -1})
	if paced.err != nil {
		t.Fatal(paced.err)
	}
	steps := 0
	for _, rec := range paced.records {
		if rec.LocalSteps < 1 {
			t.Fatalf("round %d took %d local steps, want at least 1", rec.Round, rec.LocalSteps)
		}
		steps += rec.LocalSteps
	}
	if n := len(paced.records); n != 13 {
		t.Fatalf("--max-rounds 12 paced ran %d rounds, want 13 (12 and the one that flushes)", n)
	}
	requireStepsOfSGD(t, cfg, steps, paced.params[0], "paced")
}

// Paced, a rank goes on stepping while its exchange crosses a slow network: every message of
// the collectives waits 40 ms before it leaves (slowExchange), a step takes 2 ms, and the
// state service's messages pass at once. Ended by READY, which comes after about one step of
// the (equally fast) ranks, a round holds one or two steps and the rank then waits for the
// exchange; paced, rank 0 takes about 20 steps a round (the test asks for 4 on average, a
// margin for a loaded machine), and the job ends with identical models.
func TestESyncPacedStepsWhileExchangeFlies(t *testing.T) {
	const rounds = 6
	cfg := pacedConfig(rounds)
	cfg.Outer, cfg.Compress = OuterNesterov, "int8"
	cfg.Slowdown, cfg.SlowdownBase = []float64{1, 1}, 2*time.Millisecond
	out := runCkptJob(t, ckptJob{cfg: cfg, size: 2, cancelAt: -1, timeout: 30 * time.Second,
		wrap: func(ep transport.Endpoint) transport.Endpoint { return slowExchange{ep, 40 * time.Millisecond} }})
	requireIdentical(t, out, "collectives over a slow network")
	steps := 0
	for _, rec := range out.records {
		steps += rec.LocalSteps
	}
	t.Logf("rank 0: %d local steps in %d rounds", steps, len(out.records))
	if len(out.records) != rounds+1 || steps < 4*(rounds+1) {
		t.Fatalf("rank 0 took %d local steps in %d rounds, want at least %d in %d", steps, len(out.records), 4*(rounds+1), rounds+1)
	}
}

// slowExchange is an endpoint whose collectives' messages each wait delay before they leave,
// a network slow against a step; the services' channels pass straight through. It hides the
// endpoint's arena (it has no Unwrap), so the collectives go through its Send.
type slowExchange struct {
	transport.Endpoint
	delay time.Duration
}

func (s slowExchange) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if h.Channel < service.FirstChannel {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Endpoint.Send(ctx, to, h, payload)
}

// --esync-paced is a flag of esync's, off by default and recorded in its options
// (config.json); it is refused without --esync-overlap, and with --esync-queries nonblocking,
// naming both flags.
func TestESyncPacedFlag(t *testing.T) {
	for _, given := range []bool{false, true} {
		requireESyncFlag(t, [][2]string{{"esync-overlap", "true"}}, "esync-paced", given, func(o *ESyncConfig) bool { return o.Paced })
	}
	base := [][2]string{{"sync", "esync"}, {"collective", "ring"}}
	for _, c := range []struct {
		flags [][2]string
		want  []string
	}{
		{[][2]string{{"esync-paced", "true"}}, []string{"--esync-paced", "--esync-overlap"}},
		{[][2]string{{"esync-paced", "true"}, {"esync-overlap", "true"}, {"esync-queries", "nonblocking"}}, []string{"--esync-paced", "--esync-queries nonblocking"}},
	} {
		cfg, err := ConfigFromFlags(Builtin(), append(slices.Clone(base), c.flags...))
		if err == nil {
			err = Builtin().Validate(&cfg, 4)
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("flags %v: error %v, want one naming %s", c.flags, err, w)
			}
		}
	}
}
