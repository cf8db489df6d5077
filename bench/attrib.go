package bench

import (
	"fmt"
	"slices"

	"github.com/hetsync/hetsync/collective"
)

// attributor is what a Communicator offers when it can say whom its calls waited for
// (*collective.Comm does).
type attributor interface {
	SetAttribution(on bool)
	LastCall() (collective.CallStats, bool)
}

// Attribution is what the attributed calls of one size found: every rank finds the same.
type Attribution struct {
	Calls int `json:"attributed"`
	// SkewUs is the median over the calls of the arrival skew: how long after the first rank
	// the last one started the call, in microseconds.
	SkewUs float64 `json:"skew_us"`
	// LateRank is the rank that started last in most calls (the larger total skew breaks a
	// tie), -1 when none did or nothing was attributed.
	LateRank int `json:"late_rank"`
	// Culprit is what most calls' waiting is attributed to: "rank N", "link A->B" or "none";
	// empty when nothing was attributed.
	Culprit string `json:"culprit,omitempty"`
}

// attribute makes k more calls with attribution on, when comm attributes, and says whom
// they waited for. Every rank switches attribution on and off at the same call.
func attribute(comm Communicator, k int, call func() error) (Attribution, error) {
	none := Attribution{LateRank: -1}
	a, ok := comm.(attributor)
	if !ok || k <= 0 {
		return none, nil
	}
	a.SetAttribution(true)
	defer a.SetAttribution(false)
	p := comm.Size()
	skews := make([]float64, 0, k)
	lateCalls, lateSkew := make([]int, p), make([]float64, p)
	culprits := map[string]int{}
	for range k {
		if err := call(); err != nil {
			return none, err
		}
		s, ok := a.LastCall()
		if !ok {
			return none, fmt.Errorf("no attribution after an attributed call")
		}
		us := float64(s.Skew.Nanoseconds()) / 1e3
		skews = append(skews, us)
		if s.LateRank >= 0 && s.LateRank < p {
			lateCalls[s.LateRank]++
			lateSkew[s.LateRank] += us
		}
		switch s.Culprit {
		case collective.CulpritRank:
			culprits[fmt.Sprintf("rank %d", s.LateRank)]++
		case collective.CulpritLink:
			culprits["link "+s.SlowLink.String()]++
		default:
			culprits["none"]++
		}
	}
	slices.Sort(skews)
	res := Attribution{Calls: k, SkewUs: skews[(k-1)/2], LateRank: -1}
	for r := range p {
		if lateCalls[r] == 0 {
			continue
		}
		if res.LateRank < 0 || lateCalls[r] > lateCalls[res.LateRank] ||
			lateCalls[r] == lateCalls[res.LateRank] && lateSkew[r] > lateSkew[res.LateRank] {
			res.LateRank = r
		}
	}
	for c, n := range culprits {
		if m := culprits[res.Culprit]; res.Culprit == "" || n > m || n == m && c < res.Culprit {
			res.Culprit = c
		}
	}
	return res, nil
}
