package trainer

import (
	"slices"
	"time"
)

// stragglerDetector is Sync-Switch's online straggler detector (docs/algorithms.md#the-straggler-detector, a
// reconstruction: the paper's code is not public). It is a pure function of the BSP round
// times the ranks agreed on: a straggler is detected when each of the last Window rounds took
// more than Threshold × the baseline ("for K consecutive steps", as the paper says), the baseline being the
// median round time of up to 8×Window rounds before them (at least Window of them, so the
// first rounds only build the baseline). Every round of the window, not its median: on a
// shared host rank 0's evaluation slows a few rounds in a row, which sets off a median rule
// with no straggler present (docs/results/tuning.md#sync-switch-the-straggler-detector),
// while a straggler slows every round.
//
// Round times, not per-rank compute times: a slow link (the paper's netem stragglers) slows
// every rank's round alike and shows in no compute time, a slow device shows in the round time
// too, and per-step compute times of ranks that share a host's cores are too noisy to
// compare. Heterogeneity present from
// the start is in the baseline: the policies react to transient stragglers only. Medians
// keep one noisy round from hiding a straggler in the baseline.
type stragglerDetector struct {
	Threshold float64 // θ, default 1.5
	Window    int     // K, default 5
}

// windows splits the round times hist (oldest first) into the last Window rounds and the
// baseline before them (at most 8×Window rounds); both nil while there is no baseline yet.
func (d stragglerDetector) windows(hist []time.Duration) (recent, base []time.Duration) {
	k := d.Window
	if k < 1 || len(hist) < 2*k {
		return nil, nil
	}
	recent, base = hist[len(hist)-k:], hist[:len(hist)-k]
	if len(base) > 8*k {
		base = base[len(base)-8*k:]
	}
	return recent, base
}

// Detect reports whether the round times hist (oldest first) end in a straggler.
func (d stragglerDetector) Detect(hist []time.Duration) bool {
	recent, base := d.windows(hist)
	if recent == nil {
		return false
	}
	baseline := medianDuration(slices.Clone(base))
	return baseline > 0 && float64(slices.Min(recent)) > d.Threshold*float64(baseline)
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

// Medians returns the detector's two medians for hist: of the last Window rounds and of the
// baseline before them (zeros while there is no baseline yet).
func (d stragglerDetector) Medians(hist []time.Duration) (recent, baseline time.Duration) {
	r, b := d.windows(hist)
	return medianDuration(slices.Clone(r)), medianDuration(slices.Clone(b))
}

// Sync-Switch's actions after a BSP round (stragglerPolicy.Decide).
const (
	actStay      = iota // keep training with BSP
	actSwitch           // switch to ASP for the rest of the run
	actExcursion        // switch to ASP for Rounds global rounds, then back to BSP
)

// policyInput is what the ranks agree on after a BSP round.
type policyInput struct {
	Planned  bool // the planned BSP work is done (or rank 0's time-based vote)
	Detected bool // the detector sees a straggler
	// Remaining is the planned BSP rounds still to train, -1 when the switch is by time.
	Remaining int
	// Slow and Base are the detector's recent and baseline median round times.
	Slow, Base time.Duration
	// SwitchCost is the ranks' mean cost of one switch so far (0 before the first).
	SwitchCost time.Duration
	// Spare is the global rounds the run has left beyond the remaining BSP work (what ASP
	// may take before the run ends), -1 when the run is bounded by time.
	Spare int
}

// policyAction is a decision of stragglerPolicy.
type policyAction struct {
	Kind   int
	Rounds int // actExcursion: its length in global rounds
}

// stragglerPolicy is Sync-Switch's online policy for transient stragglers (docs/algorithms.md#the-online-policies,
// reconstructed; the paper's code is not public). It is a deterministic function of what the
// ranks agree on, so every rank takes the same decisions.
//
//   - none: only the planned switch.
//   - greedy: on detection, switch to ASP at once and stay there: the rest of the planned BSP
//     work is given up (the BSP fraction is cut short, which may cost accuracy).
//   - elastic: on detection, an excursion to ASP, then back to BSP to finish the planned BSP
//     work, so the BSP work, and with it the accuracy, is preserved. The straggler's duration
//     is unknown, so excursions probe it: the first lasts ElasticRounds global rounds; when
//     the detector fires again within 3×Window BSP rounds of coming back (the straggler
//     outlasted the excursion), the next excursion is twice as long, otherwise it starts
//     over at ElasticRounds. An excursion is skipped when the straggled rounds it would save,
//     Remaining × (Slow − Base), cost less than its two switches, and it never takes more
//     than half of the rounds the run has to spare beyond the remaining BSP work (Spare), so
//     that the run still ends with all of its BSP work done, and later stragglers and the
//     planned ASP phase keep some ASP work.
type stragglerPolicy struct {
	Policy        string // none, greedy or elastic
	ElasticRounds int
	Window        int

	next        int // length of the next excursion; 0: ElasticRounds
	sinceReturn int // BSP rounds since the last excursion ended; -1: none yet
}

func newStragglerPolicy(policy string, elasticRounds, window int) stragglerPolicy {
	return stragglerPolicy{Policy: policy, ElasticRounds: elasticRounds, Window: window, sinceReturn: -1}
}

// Decide is the action after a BSP round.
func (p *stragglerPolicy) Decide(in policyInput) policyAction {
	if p.sinceReturn >= 0 {
		p.sinceReturn++
	}
	switch {
	case in.Planned:
		return policyAction{Kind: actSwitch}
	case !in.Detected || p.Policy == "none":
		return policyAction{Kind: actStay}
	case p.Policy == "greedy":
		return policyAction{Kind: actSwitch}
	}
	// elastic
	if in.Remaining >= 0 && in.SwitchCost > 0 &&
		time.Duration(in.Remaining)*(in.Slow-in.Base) < 2*in.SwitchCost {
		return policyAction{Kind: actStay}
	}
	n := p.ElasticRounds
	if p.sinceReturn >= 0 && p.sinceReturn <= 3*p.Window && p.next > 0 {
		n = 2 * p.next
	}
	if in.Spare >= 0 && n > in.Spare/2 {
		// The run must still end with all of the planned BSP work done, and keep ASP work
		// for later stragglers and for the planned ASP phase.
		n = in.Spare / 2
	}
	if n < 1 {
		return policyAction{Kind: actStay}
	}
	p.next = n
	return policyAction{Kind: actExcursion, Rounds: n}
}

// Returned records that an excursion ended (the ranks are back in BSP).
func (p *stragglerPolicy) Returned() { p.sinceReturn = 0 }
