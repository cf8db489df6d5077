package trainer

import (
	"context"
	"fmt"
	"time"
)

// Injector simulates a slower device on one rank: after each local step it sleeps
// (Slowdown−1)× the step's compute time plus StepSleep. The sleep is compute time in every
// metric, as in ESync's and WBSP's experiments.
//
// With Base set, a rank with Slowdown f (1 included) instead sleeps until its step has taken
// f·Base (nothing when the computation alone took longer): every rank then steps at its
// device's fixed speed, the computation hidden in that time. The per-step rule makes a
// rank's speed depend on its neighbours: when several ranks share a host's cores, its
// computation slows while the others compute, so a strategy that keeps the fast ranks busy
// (ESync, ASGD) also makes the slow ranks slower than under SSGD, where the fast ranks idle,
// and the host's other tenants change the ratios from run to run. A Base above the step's
// computation models devices whose speeds are their own and exactly f apart.
type Injector struct {
	Slowdown  float64       // ≥ 1; 0 means 1
	StepSleep time.Duration // fixed extra time per step
	Base      time.Duration // step time of factor 1; 0 scales each step's compute
	// After is the part of a step that follows the sleep (a strategy's local update, which
	// ESync times): with Base set it is counted inside the step's f·Base.
	After time.Duration
	timer *time.Timer
}

// NewInjector returns rank's injector from the per-rank lists of cfg.
func NewInjector(cfg *Config, rank int) *Injector {
	in := &Injector{Slowdown: 1, Base: cfg.SlowdownBase}
	if rank < len(cfg.Slowdown) {
		in.Slowdown = cfg.Slowdown[rank]
	}
	if rank < len(cfg.StepSleep) {
		in.StepSleep = cfg.StepSleep[rank]
	}
	return in
}

// Extra is the injected time for a step that computed for compute.
func (in *Injector) Extra(compute time.Duration) time.Duration {
	if in == nil {
		return 0
	}
	d := in.StepSleep
	switch {
	case in.Base > 0:
		d += max(0, time.Duration(max(1, in.Slowdown)*float64(in.Base))-compute-in.After)
	case in.Slowdown > 1:
		d += time.Duration((in.Slowdown - 1) * float64(compute))
	}
	return d
}

// Sleep waits d or until ctx ends. It reuses one timer, so steady-state steps do not allocate.
func (in *Injector) Sleep(ctx context.Context, d time.Duration) error {
	_, _, err := sleepOr[struct{}](ctx, &in.timer, d, nil)
	return err
}

// sleepOr waits d on *timer (made on first use, then reused), or until wake delivers a
// value, which it returns with woke true, or until ctx ends. A nil wake never delivers.
func sleepOr[T any](ctx context.Context, timer **time.Timer, d time.Duration, wake <-chan T) (v T, woke bool, err error) {
	if d <= 0 {
		return v, false, ctx.Err()
	}
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Reset(d)
	}
	select {
	case <-(*timer).C:
		return v, false, nil
	case v = <-wake:
		(*timer).Stop()
		return v, true, nil
	case <-ctx.Done():
		(*timer).Stop()
		return v, false, ctx.Err()
	}
}

// heteroFactor is the per-step sleep of WBSP's heterogeneity settings H1–H3 (see
// docs/algorithms.md#heterogeneity-injection) in units of the fast step time: the odd ranks
// sleep {5, 10, 15}× t_fast (the original: 0.5, 1.0 and 1.5 s against a fast step of tens of
// milliseconds).
func heteroFactor(profile string) (float64, bool) {
	switch profile {
	case "h1":
		return 5, true
	case "h2":
		return 10, true
	case "h3":
		return 15, true
	}
	return 0, false
}

// HeteroProfileSleep returns Config.StepSleep for profile (h1, h2 or h3) in a job of size
// ranks whose fast step takes tFast: odd ranks sleep factor×tFast per step, even ranks none.
func HeteroProfileSleep(profile string, size int, tFast time.Duration) ([]time.Duration, error) {
	f, ok := heteroFactor(profile)
	if !ok {
		return nil, fmt.Errorf("trainer: --hetero-profile must be h1, h2 or h3, got %q", profile)
	}
	if size < 1 {
		return nil, fmt.Errorf("trainer: --hetero-profile needs the number of ranks, got %d", size)
	}
	if tFast <= 0 {
		return nil, fmt.Errorf("trainer: --hetero-profile %s needs a positive fast step time, got %v", profile, tFast)
	}
	out := make([]time.Duration, size)
	for r := 1; r < size; r += 2 {
		out[r] = time.Duration(f * float64(tFast))
	}
	return out, nil
}
