package collective

import (
	"fmt"
	"math"
	"time"

	"github.com/hetsync/hetsync/topology"
)

// Planned is what auto runs for one call on a network, without running it: the collective,
// the call's size, the configuration auto chooses and its predicted time, and every
// candidate's predicted time in auto's candidate order.
type Planned struct {
	Collective string
	Bytes      int
	Algorithm  string
	Predicted  time.Duration
	Candidates []PlannedCandidate
}

// PlannedCandidate is one configuration's predicted time. Priced is false for a candidate
// the planner left out: from 9 to 64 ranks, one whose lower bound is well above another's
// upper bound (it cannot be the fastest, and is not replayed); above the jobs auto replays in
// full, a parameter server's reduce-scatter or allgather (not priced).
type PlannedCandidate struct {
	Algorithm string
	Predicted time.Duration
	Priced    bool
}

// Plan predicts what auto runs for a float32 call of each size (bytes) of the collective
// ("allreduce", "reduce-scatter" or "allgather") on the network hm describes, with
// segmentBytes per message (0: DefaultSegmentBytes), as every rank of such a job would
// decide it. It reads the network host by host, so a description of 10,000 ranks plans in
// about the time a job of that size plans one call.
func Plan(hm *topology.HostMatrix, collective string, sizes []int, segmentBytes int) ([]Planned, error) {
	if err := hm.Validate(); err != nil {
		return nil, err
	}
	kind, ok := map[string]collKind{"allreduce": kindAllReduce, "reduce-scatter": kindReduceScatter, "allgather": kindAllGather}[collective]
	if !ok {
		return nil, fmt.Errorf("collective: Plan: unknown collective %q (allreduce, reduce-scatter, allgather)", collective)
	}
	if segmentBytes == 0 {
		segmentBytes = DefaultSegmentBytes
	}
	if segmentBytes < 4 {
		return nil, fmt.Errorf("collective: Plan: segment of %d bytes, want at least one float32", segmentBytes)
	}
	a := newHostAuto(hm)
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Planned
	for _, bytes := range sizes {
		if bytes < 4 {
			return nil, fmt.Errorf("collective: Plan: a call of %d bytes, want at least one float32", bytes)
		}
		b := newBuilder(hm.P, 0, bytes/4, 4, segmentBytes)
		cands := a.candidates(kind)
		priced := a.price(kind, b, cands)
		choice := pickFrom(cands, priced)
		pl := Planned{Collective: collective, Bytes: bytes, Algorithm: choice.name, Predicted: seconds(choice.predicted)}
		for i, c := range cands {
			t := priced.times[i]
			pl.Candidates = append(pl.Candidates, PlannedCandidate{Algorithm: c.name, Predicted: seconds(t), Priced: !math.IsInf(t, 0)})
		}
		out = append(out, pl)
	}
	return out, nil
}
