package metrics

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// AccuracyTargets are the time-to-accuracy thresholds reported in summary.json.
func AccuracyTargets() []float64 { return []float64{0.70, 0.75, 0.80, 0.85, 0.90} }

// Summary is summary.json: the run reduced to the numbers the papers compare.
type Summary struct {
	Config any `json:"config,omitempty"`
	// Collective is what the training rounds ran over (for auto, the algorithm auto chose; the
	// parameter server; none) and DataPath the transport and data path their bytes took, as
	// the run recorded them; empty when it did not.
	Collective string `json:"collective,omitempty"`
	DataPath   string `json:"data_path,omitempty"`
	Ranks      int    `json:"ranks"`
	// Rounds is the number of distinct round numbers recorded (per-rank counts are in PerRank).
	Rounds int     `json:"rounds"`
	WallS  float64 `json:"wall_s"` // latest time_s of any round record (of any eval when there are none)
	// TimeToAccuracy maps "0.70" … "0.90" to the time_s of the first evaluation whose
	// accuracy reached the target; targets never reached are absent.
	TimeToAccuracy map[string]float64 `json:"time_to_accuracy"`
	Evaluations    int                `json:"evaluations"`
	FinalAccuracy  float64            `json:"final_accuracy"` // accuracy of the latest evaluation
	BestAccuracy   float64            `json:"best_accuracy"`
	FinalLoss      float64            `json:"final_loss"` // test loss of the latest evaluation
	Samples        int64              `json:"samples"`    // Σ samples over all ranks and rounds
	Throughput     float64            `json:"throughput_samples_per_s"`
	BytesSent      int64              `json:"bytes_sent"`
	BytesRecv      int64              `json:"bytes_recv"`
	// SentByLink is what all ranks sent by class of link (RoundRecord.Sent); absent for runs
	// that did not count it.
	SentByLink *LinkBytes `json:"sent_by_link,omitempty"`
	// TrafficMBps is (bytes_sent + bytes_recv) over all ranks ÷ 10⁶ ÷ wall_s; the one-way
	// figures are beside it.
	TrafficMBps     float64       `json:"traffic_mb_per_s"`
	SentMBps        float64       `json:"sent_mb_per_s"`
	RecvMBps        float64       `json:"recv_mb_per_s"`
	PerRank         []RankSummary `json:"per_rank"`
	MeanComputation float64       `json:"mean_computation_ratio"`
	// EndedEarly is set when the run stopped before its stop rule (EndEarly); nil when it
	// ran to its end.
	EndedEarly *EarlyEnd `json:"ended_early,omitempty"`
}

// RankSummary is one rank's totals.
type RankSummary struct {
	Rank      int     `json:"rank"`
	Rounds    int     `json:"rounds"`
	Samples   int64   `json:"samples"`
	ElapsedS  float64 `json:"elapsed_s"` // the rank's latest time_s
	ComputeS  float64 `json:"compute_s"`
	CommS     float64 `json:"comm_s"`
	WaitS     float64 `json:"wait_s"`
	BytesSent int64   `json:"bytes_sent"`
	BytesRecv int64   `json:"bytes_recv"`
	// SentByLink is the rank's RoundRecord.Sent summed; absent for a rank that counted none.
	SentByLink *LinkBytes `json:"sent_by_link,omitempty"`
	// ComputationRatio = compute_s ÷ elapsed_s (docs/algorithms.md#metrics; injected sleep counts
	// as compute).
	ComputationRatio float64 `json:"computation_ratio"`
	// ESyncComputingRatio = 1 − (comm_s + wait_s) ÷ elapsed_s: ESync's drawer.py figure 5,
	// where only the global aggregate (communication and barrier waiting) is non-computing.
	ESyncComputingRatio float64 `json:"esync_computing_ratio"`
}

// TargetKey formats a threshold as a time_to_accuracy key ("0.80").
func TargetKey(a float64) string { return strconv.FormatFloat(a, 'f', 2, 64) }

// Summarize reduces the records of a run. It does not modify its arguments. Evaluations are
// taken in time order (ties in round order); an accuracy that is NaN never reaches a target.
func Summarize(config any, rounds []RoundRecord, evals []EvalRecord) Summary {
	s := Summary{Config: config, TimeToAccuracy: map[string]float64{}}

	perRank := map[int]*RankSummary{}
	distinct := map[int]struct{}{}
	for i := range rounds {
		r := &rounds[i]
		rs := perRank[r.Rank]
		if rs == nil {
			rs = &RankSummary{Rank: r.Rank}
			perRank[r.Rank] = rs
		}
		rs.Rounds++
		rs.Samples += int64(r.Samples)
		rs.ElapsedS = math.Max(rs.ElapsedS, finite(r.TimeS))
		rs.ComputeS += finite(r.ComputeS)
		rs.CommS += finite(r.CommS)
		rs.WaitS += finite(r.WaitS)
		rs.BytesSent += r.BytesSent
		rs.BytesRecv += r.BytesRecv
		if r.Sent != (LinkBytes{}) {
			rs.SentByLink = addLinks(rs.SentByLink, r.Sent)
		}
		distinct[r.Round] = struct{}{}
	}
	s.Rounds = len(distinct)
	s.Ranks = len(perRank)
	for _, rs := range perRank {
		if rs.ElapsedS > 0 {
			rs.ComputationRatio = rs.ComputeS / rs.ElapsedS
			rs.ESyncComputingRatio = 1 - (rs.CommS+rs.WaitS)/rs.ElapsedS
		}
		s.WallS = math.Max(s.WallS, rs.ElapsedS)
		s.Samples += rs.Samples
		s.BytesSent += rs.BytesSent
		s.BytesRecv += rs.BytesRecv
		if rs.SentByLink != nil {
			s.SentByLink = addLinks(s.SentByLink, *rs.SentByLink)
		}
		s.PerRank = append(s.PerRank, *rs)
	}
	slices.SortFunc(s.PerRank, func(a, b RankSummary) int { return a.Rank - b.Rank })
	if len(s.PerRank) > 0 {
		for _, rs := range s.PerRank {
			s.MeanComputation += rs.ComputationRatio
		}
		s.MeanComputation /= float64(len(s.PerRank))
	}

	var ev []EvalRecord
	for _, e := range evals {
		if !math.IsNaN(e.Accuracy) && !math.IsInf(e.TimeS, 0) && !math.IsNaN(e.TimeS) {
			ev = append(ev, e)
		}
	}
	slices.SortStableFunc(ev, func(a, b EvalRecord) int {
		switch {
		case a.TimeS < b.TimeS:
			return -1
		case a.TimeS > b.TimeS:
			return 1
		}
		return a.Round - b.Round
	})
	s.Evaluations = len(ev)
	if len(rounds) == 0 && len(ev) > 0 {
		s.WallS = ev[len(ev)-1].TimeS
	}
	for i, e := range ev {
		if i == 0 || e.Accuracy > s.BestAccuracy {
			s.BestAccuracy = e.Accuracy
		}
		for _, a := range AccuracyTargets() {
			k := TargetKey(a)
			if _, done := s.TimeToAccuracy[k]; !done && e.Accuracy >= a {
				s.TimeToAccuracy[k] = e.TimeS
			}
		}
	}
	if len(ev) > 0 {
		s.FinalAccuracy = ev[len(ev)-1].Accuracy
		s.FinalLoss = ev[len(ev)-1].Loss
	}

	if s.WallS > 0 {
		s.Throughput = float64(s.Samples) / s.WallS
		s.SentMBps = float64(s.BytesSent) / 1e6 / s.WallS
		s.RecvMBps = float64(s.BytesRecv) / 1e6 / s.WallS
		s.TrafficMBps = s.SentMBps + s.RecvMBps
	}
	return s
}

// finite maps NaN and ±Inf (null in a hand-edited file) to 0 so one bad value cannot poison
// the sums.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

type summaryJSON Summary

// MarshalJSON writes a non-finite final_loss (a diverged model) as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	out := struct {
		summaryJSON
		FinalLoss *float64 `json:"final_loss"`
	}{summaryJSON: summaryJSON(s)}
	if !math.IsNaN(s.FinalLoss) && !math.IsInf(s.FinalLoss, 0) {
		out.FinalLoss = &s.FinalLoss
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a null final_loss back as NaN.
func (s *Summary) UnmarshalJSON(data []byte) error {
	var in struct {
		summaryJSON
		FinalLoss *float64 `json:"final_loss"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*s = Summary(in.summaryJSON)
	s.FinalLoss = math.NaN()
	if in.FinalLoss != nil {
		s.FinalLoss = *in.FinalLoss
	}
	return nil
}
