package trainer

import (
	"time"

	"github.com/hetsync/hetsync/collective"
)

// attributing is the part of collective.Comm that says whom its calls waited for
// (docs/attribution.md).
type attributing interface {
	SetAttribution(on bool)
	Waits() collective.Waits
}

// lateWaits follows the communicator's attribution over a run, for the late_rank and
// late_wait_s of each round's record.
type lateWaits struct {
	c    attributing // nil when the worker has no communicator that attributes
	last []time.Duration
}

// startLateWaits switches attribution on for the worker's communicator, when it has one that
// attributes. Every rank calls it at the same point of the run, as attribution requires.
func startLateWaits(comm Collective) *lateWaits {
	c, ok := comm.(attributing)
	if !ok {
		return &lateWaits{}
	}
	c.SetAttribution(true)
	return &lateWaits{c: c, last: c.Waits().ForRank}
}

// round is the rank this rank waited for longest since the previous round and how long, in
// seconds; -1 and 0 when it waited for nobody.
func (l *lateWaits) round() (late int, waitS float64) {
	if l.c == nil {
		return -1, 0
	}
	w := l.c.Waits()
	late = -1
	var most time.Duration
	for r, d := range w.ForRank {
		if r < len(l.last) {
			d -= l.last[r]
		}
		if d > most {
			late, most = r, d
		}
	}
	l.last = w.ForRank
	return late, most.Seconds()
}
