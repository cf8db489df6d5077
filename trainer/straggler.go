package trainer

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// StragglerConfig describes transient stragglers (Sync-Switch's scenarios, see
// docs/algorithms.md#heterogeneity-injection): during each window [At, At+For) measured from the training start, the listed
// ranks are slowed by Delay, either on the network (every message they send waits Delay
// first: transport.Delayed) or on compute (every local step's batch fetch waits Delay, and
// the wait counts as compute).
//
// The flag syntax is "ranks=1,2;delay=30ms;at=20s,60s;for=10s[;mode=network|compute]" or
// "preset:s1" / "preset:s2" (StragglerPresets).
type StragglerConfig struct {
	Ranks []int           `json:"ranks,omitempty"`
	Delay time.Duration   `json:"delay,omitempty"`
	At    []time.Duration `json:"at,omitempty"`
	For   time.Duration   `json:"for,omitempty"`
	Mode  string          `json:"mode,omitempty"` // "network" (default) or "compute"
}

// StragglerPresets are the two Sync-Switch scenarios of its paper, scaled to a run of about a
// minute: s1 is one occurrence of one straggler at +10 ms, s2 four occurrences of two
// stragglers at +30 ms.
func StragglerPresets() map[string]string {
	return map[string]string{
		"s1": "ranks=1;delay=10ms;at=10s;for=20s",
		"s2": "ranks=1,2;delay=30ms;at=5s,20s,35s,50s;for=8s",
	}
}

// Enabled reports whether any straggler is configured.
func (s StragglerConfig) Enabled() bool { return len(s.Ranks) > 0 && s.Delay > 0 && len(s.At) > 0 }

// ParseStragglers reads the --stragglers flag. The empty string means none.
func ParseStragglers(text string) (StragglerConfig, error) {
	var s StragglerConfig
	text = strings.TrimSpace(text)
	if text == "" {
		return s, nil
	}
	if name, ok := strings.CutPrefix(text, "preset:"); ok {
		p, ok := StragglerPresets()[name]
		if !ok {
			return s, fmt.Errorf("trainer: --stragglers %q: unknown preset %q (known: s1, s2)", text, name)
		}
		text = p
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(text, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || val == "" {
			return s, fmt.Errorf("trainer: --stragglers: %q is not key=value (want ranks=1,2;delay=30ms;at=20s,60s;for=10s)", part)
		}
		if seen[key] {
			return s, fmt.Errorf("trainer: --stragglers: %s given twice", key)
		}
		seen[key] = true
		switch key {
		case "ranks":
			for _, r := range strings.Split(val, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(r))
				if err != nil || n < 0 {
					return s, fmt.Errorf("trainer: --stragglers: ranks entry %q is not a rank number", r)
				}
				s.Ranks = append(s.Ranks, n)
			}
		case "delay":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return s, fmt.Errorf("trainer: --stragglers: delay %q is not a positive duration (30ms)", val)
			}
			s.Delay = d
		case "at":
			for _, a := range strings.Split(val, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(a))
				if err != nil || d < 0 {
					return s, fmt.Errorf("trainer: --stragglers: at entry %q is not a duration ≥ 0 (20s)", a)
				}
				s.At = append(s.At, d)
			}
		case "for":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return s, fmt.Errorf("trainer: --stragglers: for %q is not a positive duration (10s)", val)
			}
			s.For = d
		case "mode":
			if val != "network" && val != "compute" {
				return s, fmt.Errorf("trainer: --stragglers: mode %q must be network or compute", val)
			}
			s.Mode = val
		default:
			return s, fmt.Errorf("trainer: --stragglers: unknown key %q (known: ranks, delay, at, for, mode)", key)
		}
	}
	for _, k := range []string{"ranks", "delay", "at", "for"} {
		if !seen[k] {
			return s, fmt.Errorf("trainer: --stragglers %q: missing %s= (want ranks=1,2;delay=30ms;at=20s,60s;for=10s)", text, k)
		}
	}
	if s.Mode == "" {
		s.Mode = "network"
	}
	// Validate names the Config field; here the flag is what was given.
	return s, InFlags(s.Validate(0))
}

// Validate checks the configuration; size > 0 also checks the ranks against the job size.
func (s StragglerConfig) Validate(size int) error {
	if len(s.Ranks) == 0 && s.Delay == 0 && len(s.At) == 0 && s.For == 0 && s.Mode == "" {
		return nil
	}
	switch {
	case len(s.Ranks) == 0:
		return fmt.Errorf("trainer: Config.Stragglers: no ranks")
	case s.Delay <= 0:
		return fmt.Errorf("trainer: Config.Stragglers: delay must be positive, got %v", s.Delay)
	case len(s.At) == 0:
		return fmt.Errorf("trainer: Config.Stragglers: no window start (at=)")
	case s.For <= 0:
		return fmt.Errorf("trainer: Config.Stragglers: window length (for=) must be positive, got %v", s.For)
	case s.Mode != "" && s.Mode != "network" && s.Mode != "compute":
		return fmt.Errorf("trainer: Config.Stragglers: mode %q must be network or compute", s.Mode)
	}
	for i, r := range s.Ranks {
		if size > 0 && r >= size {
			return fmt.Errorf("trainer: Config.Stragglers: rank %d out of range for %d ranks", r, size)
		}
		if slices.Contains(s.Ranks[:i], r) {
			return fmt.Errorf("trainer: Config.Stragglers: rank %d listed twice", r)
		}
	}
	for i := 1; i < len(s.At); i++ {
		if s.At[i] < s.At[i-1]+s.For {
			return fmt.Errorf("trainer: Config.Stragglers: windows must be in order and not overlap: at=%v starts before the window at %v (for=%v) ends", s.At[i], s.At[i-1], s.For)
		}
	}
	return nil
}

// Windows are the straggling windows of rank (none when rank is not listed).
func (s StragglerConfig) Windows(rank int) []transport.DelayWindow {
	if !s.Enabled() || !slices.Contains(s.Ranks, rank) {
		return nil
	}
	w := make([]transport.DelayWindow, len(s.At))
	for i, a := range s.At {
		w[i] = transport.DelayWindow{From: a, To: a + s.For}
	}
	return w
}

// DelayAt is the delay rank suffers at elapsed time since the training start.
func (s StragglerConfig) DelayAt(rank int, elapsed time.Duration) time.Duration {
	for _, w := range s.Windows(rank) {
		if elapsed >= w.From && elapsed < w.To {
			return s.Delay
		}
	}
	return 0
}

// WrapEndpoint decorates ep with the network-mode delays of its rank; other ranks and compute
// mode get ep back unchanged. The windows count from the decorator's first message on a
// channel other than job control's (the first training message, right after the start
// barrier and the parameters' broadcast).
func (s StragglerConfig) WrapEndpoint(ep transport.Endpoint) transport.Endpoint {
	if s.Mode == "compute" {
		return ep
	}
	w := s.Windows(ep.Rank())
	if len(w) == 0 {
		return ep
	}
	return transport.NewDelayed(ep, s.Delay, w, []transport.Channel{service.ChannelOf(controlServiceName)})
}

// stragglerModel slows a rank's model steps inside the compute-mode windows; LocalStep
// counts the delay as compute.
type stragglerModel struct {
	inner Model
	cfg   StragglerConfig
	rank  int
	start time.Time
	now   func() time.Time
	inj   Injector // only its reusable timer
}

func (m *stragglerModel) Params() []float32 { return m.inner.Params() }

func (m *stragglerModel) Step(ctx context.Context, grad []float32) (StepResult, error) {
	if d := m.cfg.DelayAt(m.rank, m.now().Sub(m.start)); d > 0 {
		if err := m.inj.Sleep(ctx, d); err != nil {
			return StepResult{}, err
		}
	}
	return m.inner.Step(ctx, grad)
}

// applyComputeStragglers installs the compute-mode stragglers on w, with windows counted from
// now (right after the start barrier).
func applyComputeStragglers(w *Worker) {
	s := w.Cfg.Stragglers
	if s.Mode != "compute" || len(s.Windows(w.Rank)) == 0 {
		return
	}
	if _, done := w.Model.(*stragglerModel); done {
		return
	}
	w.Model = &stragglerModel{inner: w.Model, cfg: s, rank: w.Rank, start: w.Now(), now: w.Now}
}
