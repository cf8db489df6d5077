package trainer

import (
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

func TestParseStragglers(t *testing.T) {
	s := time.Second
	tests := []struct {
		in   string
		want StragglerConfig
		err  string
	}{
		{in: ""},
		{in: "ranks=1,2;delay=30ms;at=20s,60s;for=10s",
			want: StragglerConfig{Ranks: []int{1, 2}, Delay: 30 * time.Millisecond, At: []time.Duration{20 * s, 60 * s}, For: 10 * s, Mode: "network"}},
		{in: " ranks=3 ; delay=5ms ; at=0s ; for=1s ; mode=compute ",
			want: StragglerConfig{Ranks: []int{3}, Delay: 5 * time.Millisecond, At: []time.Duration{0}, For: s, Mode: "compute"}},
		{in: "preset:s1", want: StragglerConfig{Ranks: []int{1}, Delay: 10 * time.Millisecond, At: []time.Duration{10 * s}, For: 20 * s, Mode: "network"}},
		{in: "preset:s3", err: "unknown preset"},
		{in: "ranks=1;delay=30ms;at=20s", err: "missing for="},
		{in: "ranks=1;delay=-3ms;at=20s;for=1s", err: "delay"},
		{in: "ranks=x;delay=3ms;at=20s;for=1s", err: "ranks entry"},
		{in: "ranks=1;delay=3ms;at=20s;for=1s;speed=2", err: `unknown key "speed"`},
		{in: "ranks=1;delay=3ms;at=20s;for=1s;mode=disk", err: "mode"},
		{in: "ranks=1;delay=3ms;at=20s,25s;for=10s", err: "overlap"},
		{in: "ranks=1,1;delay=3ms;at=20s;for=1s", err: "listed twice"},
		{in: "ranks=1;ranks=2;delay=3ms;at=20s;for=1s", err: "given twice"},
		{in: "ranks", err: "key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseStragglers(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--stragglers") {
					t.Fatalf("err = %v, want one naming --stragglers and %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalStragglers(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := ParseStragglers("preset:s2"); err != nil {
		t.Fatalf("preset s2: %v", err)
	}
}

func equalStragglers(a, b StragglerConfig) bool {
	if a.Delay != b.Delay || a.For != b.For || a.Mode != b.Mode || len(a.Ranks) != len(b.Ranks) || len(a.At) != len(b.At) {
		return false
	}
	for i := range a.Ranks {
		if a.Ranks[i] != b.Ranks[i] {
			return false
		}
	}
	for i := range a.At {
		if a.At[i] != b.At[i] {
			return false
		}
	}
	return true
}

func TestStragglerWindowsAndWrap(t *testing.T) {
	s, err := ParseStragglers("ranks=1;delay=30ms;at=2s,10s;for=3s")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(1); err == nil {
		t.Error("rank 1 accepted for a one-rank job")
	}
	tests := []struct {
		rank    int
		elapsed time.Duration
		want    time.Duration
	}{
		{1, 1999 * time.Millisecond, 0},
		{1, 2 * time.Second, 30 * time.Millisecond},
		{1, 4999 * time.Millisecond, 30 * time.Millisecond},
		{1, 5 * time.Second, 0},
		{1, 12 * time.Second, 30 * time.Millisecond},
		{0, 3 * time.Second, 0},
	}
	for _, tc := range tests {
		if got := s.DelayAt(tc.rank, tc.elapsed); got != tc.want {
			t.Errorf("rank %d at %v: delay %v, want %v", tc.rank, tc.elapsed, got, tc.want)
		}
	}
	eps := transport.NewMemJob(2)
	defer eps[0].Close()
	defer eps[1].Close()
	if _, ok := s.WrapEndpoint(eps[0]).(*transport.Delayed); ok {
		t.Error("rank 0 is no straggler but was wrapped")
	}
	if _, ok := s.WrapEndpoint(eps[1]).(*transport.Delayed); !ok {
		t.Error("rank 1 was not wrapped")
	}
	s.Mode = "compute"
	if _, ok := s.WrapEndpoint(eps[1]).(*transport.Delayed); ok {
		t.Error("compute mode wrapped the endpoint")
	}
	cfg := Config{Strategy: "ssgd", Stragglers: s}
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, 2); err != nil {
		t.Errorf("ssgd with compute stragglers: %v", err)
	}
}

// TestESyncUnderNetworkStraggler runs ESync with a network straggler from the start on the
// ps collective: the job still ends with identical replicas (the delay only slows messages).
func TestESyncUnderNetworkStraggler(t *testing.T) {
	s, err := ParseStragglers("ranks=1;delay=2ms;at=0s;for=1h")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Strategy: "esync", Collective: "ring", Batch: 8, LR: 0.05, MaxRounds: 10, Seed: 4,
		Eval: EvalEvery{Rounds: 5}, Stragglers: s}
	var delayed []*transport.Delayed
	out := runCapturedJob(t, cfg, 3, func(ep transport.Endpoint) transport.Endpoint {
		w := s.WrapEndpoint(ep)
		if d, ok := w.(*transport.Delayed); ok {
			delayed = append(delayed, d)
		}
		return w
	})
	if len(delayed) != 1 || delayed[0].DelayedSends() == 0 {
		t.Fatalf("the straggler's sends were not delayed (%d decorators)", len(delayed))
	}
	for r := 1; r < 3; r++ {
		if paramsHash(out.params[r][9]) != paramsHash(out.params[0][9]) {
			t.Fatalf("rank %d's final model differs", r)
		}
	}
}

// TestESyncUnderComputeStraggler slows rank 2's compute for the whole run: the state service
// sees its long steps and lets the others take more local steps per round.
func TestESyncUnderComputeStraggler(t *testing.T) {
	s, err := ParseStragglers("ranks=2;delay=3ms;at=0s;for=1h;mode=compute")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Strategy: "esync", Collective: "butterfly", Batch: 8, LR: 0.05, MaxRounds: 10, Seed: 4,
		Eval: EvalEvery{Rounds: 5}, Stragglers: s}
	out := runCapturedJob(t, cfg, 3, nil)
	steps := make([]int, 3)
	for r := range steps {
		for _, rec := range out.records[r] {
			steps[r] += rec.LocalSteps
		}
	}
	if steps[0] <= steps[2] || steps[1] <= steps[2] {
		t.Fatalf("local steps per rank %v: the straggler (rank 2) should step least", steps)
	}
}

// TestComputeStragglerAnyStrategy checks that compute-mode stragglers slow the straggler's
// steps whatever the strategy: its compute time per step is at least the delay, the others'
// stays below it.
func TestComputeStragglerAnyStrategy(t *testing.T) {
	const delay = 40 * time.Millisecond
	s, err := ParseStragglers("ranks=1;delay=40ms;at=0s;for=1h;mode=compute")
	if err != nil {
		t.Fatal(err)
	}
	for _, strategy := range []string{"ssgd", "asgd", "local", "ssp"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := Config{Strategy: strategy, Batch: 8, LR: 0.05, MaxRounds: 6, Seed: 4, Eval: EvalEvery{Rounds: 3}, Stragglers: s}
			out := runCapturedJob(t, cfg, 2, nil)
			perStep := make([]float64, 2)
			for r := range perStep {
				steps := 0
				for _, rec := range out.records[r] {
					perStep[r] += rec.ComputeS
					steps += rec.LocalSteps
				}
				perStep[r] /= float64(max(1, steps))
			}
			if perStep[1] < delay.Seconds() || perStep[0] >= delay.Seconds() {
				t.Fatalf("compute per step %v s: want rank 1 (the straggler) ≥ %v and rank 0 below", perStep, delay)
			}
		})
	}
}
