package trainer

import (
	"slices"
	"time"
)

// stragglerDetector is Sync-Switch's online straggler detector (algorithms.md §9.2, a
// reconstruction: the paper's code is not public). It is a pure function of the BSP round
// times the ranks agreed on: a straggler is detected when the median round time over the last
// Window rounds exceeds Threshold × the baseline, the median round time of up to 8×Window
// rounds before them (at least Window of them, so the first rounds only build the baseline).
//
// Round times, not per-rank compute times: a slow link (the paper's netem stragglers) slows
// every rank's round alike and shows in no compute time, a slow device shows in the round time
// too, and per-step compute times of ranks that share a host's cores are too noisy to compare
// (measured: 3–13 ms for the same MLP step on a busy 2-core host). Heterogeneity present from
// the start is in the baseline: the policies react to transient stragglers only. Medians
// keep one noisy round from triggering or hiding a straggler.
type stragglerDetector struct {
	Threshold float64 // θ, default 1.5
	Window    int     // K, default 5
}

// Detect reports whether the round times hist (oldest first) end in a straggler.
func (d stragglerDetector) Detect(hist []time.Duration) bool {
	k := d.Window
	if k < 1 || len(hist) < 2*k {
		return false
	}
	recent := hist[len(hist)-k:]
	base := hist[:len(hist)-k]
	if len(base) > 8*k {
		base = base[len(base)-8*k:]
	}
	baseline := medianDuration(slices.Clone(base))
	return baseline > 0 && float64(medianDuration(slices.Clone(recent))) > d.Threshold*float64(baseline)
}

// medianDuration sorts x and returns its median (the mean of the middle two for even lengths).
func medianDuration(x []time.Duration) time.Duration {
	if len(x) == 0 {
		return 0
	}
	slices.Sort(x)
	n := len(x)
	if n%2 == 1 {
		return x[n/2]
	}
	return (x[n/2-1] + x[n/2]) / 2
}
