package trainer

import (
	"slices"
	"time"
)

// stragglerDetector is Sync-Switch's online straggler detector (algorithms.md §9.2, a
// reconstruction: the paper's code is not public). It is a pure function of the BSP rounds the
// ranks agreed on. A round straggles when
//
//   - some rank's compute time exceeds Threshold × the median compute time of the ranks (a
//     slow device), or
//   - the round's time exceeds Threshold × the baseline, the median round time of up to
//     8×Window rounds before the last Window (a slow link slows every rank's round alike).
//
// A straggler is detected when each of the last Window rounds straggles.
type stragglerDetector struct {
	Threshold float64 // θ, default 1.5
	Window    int     // K, default 5
}

// roundSample is one BSP round as every rank knows it (carried in the round's allreduce).
type roundSample struct {
	Round   time.Duration   // the round's wall time (the largest over the ranks)
	Compute []time.Duration // each rank's compute time
}

// Detect reports whether hist (oldest first) ends in a straggler.
func (d stragglerDetector) Detect(hist []roundSample) bool {
	k := d.Window
	if k < 1 || len(hist) < k {
		return false
	}
	recent := hist[len(hist)-k:]
	base := hist[:len(hist)-k]
	if len(base) > 8*k {
		base = base[len(base)-8*k:]
	}
	baseline := time.Duration(0)
	if len(base) >= k {
		times := make([]time.Duration, len(base))
		for i, s := range base {
			times[i] = s.Round
		}
		baseline = medianDuration(times)
	}
	for _, s := range recent {
		if !d.straggles(s, baseline) {
			return false
		}
	}
	return true
}

// straggles says whether one round straggles against baseline (0: no baseline yet).
func (d stragglerDetector) straggles(s roundSample, baseline time.Duration) bool {
	if baseline > 0 && float64(s.Round) > d.Threshold*float64(baseline) {
		return true
	}
	if len(s.Compute) < 2 {
		return false
	}
	med := medianDuration(slices.Clone(s.Compute))
	return med > 0 && float64(slices.Max(s.Compute)) > d.Threshold*float64(med)
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
