package trainer

import (
	"context"
	"time"
)

// Injector simulates a slower device on one rank: after each local step it sleeps
// (Slowdown−1)× the step's compute time plus StepSleep. The sleep is compute time in every
// metric, as in ESync's and WBSP's experiments.
type Injector struct {
	Slowdown  float64       // ≥ 1; 0 means 1
	StepSleep time.Duration // fixed extra time per step
	timer     *time.Timer
}

// NewInjector returns rank's injector from the per-rank lists of cfg.
func NewInjector(cfg *Config, rank int) *Injector {
	in := &Injector{Slowdown: 1}
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
	if in.Slowdown > 1 {
		d += time.Duration((in.Slowdown - 1) * float64(compute))
	}
	return d
}

// Sleep waits d or until ctx ends. It reuses one timer, so steady-state steps do not allocate.
func (in *Injector) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if in.timer == nil {
		in.timer = time.NewTimer(d)
	} else {
		in.timer.Reset(d)
	}
	select {
	case <-in.timer.C:
		return nil
	case <-ctx.Done():
		in.timer.Stop()
		return ctx.Err()
	}
}
