package trainer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hetsync/hetsync/metrics"
)

// Ran is what a run's rounds ran over, recorded in summary.json beside what config.json asked.
type Ran struct {
	// Collective is Result.Collective.
	Collective string
	// DataPath is the transport and data path of the job's bytes ("mem", "p2p data-path=tcp").
	DataPath string
}

// WriteRun writes a finished run into the new run directory dir: config.json, metrics.jsonl
// (every rank's rounds, by rank then round), eval.jsonl (rank 0's evaluations in time order)
// and summary.json, which also records ran. It returns the summary.
func WriteRun(dir string, config any, all []metrics.RoundRecord, evals []EvalResult, ran Ran) (metrics.Summary, error) {
	rd, err := metrics.CreateRunDir(dir, config)
	if err != nil {
		return metrics.Summary{}, err
	}
	defer rd.Close()
	ev := append([]EvalResult(nil), evals...)
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].SnapshotTime < ev[j].SnapshotTime })
	for _, e := range ev {
		if e.Err != nil {
			continue
		}
		rec := metrics.EvalRecord{TimeS: e.SnapshotTime.Seconds(), Round: e.GlobalRound, Accuracy: e.Acc, Loss: e.Loss}
		if err := rd.Evals().WriteEval(&rec); err != nil {
			return metrics.Summary{}, err
		}
	}
	return finishRun(rd, all, ran)
}

// finishRun writes every rank's records into rd's metrics.jsonl, by rank then round, and
// summary.json, which also records ran.
func finishRun(rd *metrics.RunDir, all []metrics.RoundRecord, ran Ran) (metrics.Summary, error) {
	recs := append([]metrics.RoundRecord(nil), all...)
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Rank != recs[j].Rank {
			return recs[i].Rank < recs[j].Rank
		}
		return recs[i].Round < recs[j].Round
	})
	for i := range recs {
		if err := rd.Metrics().WriteRound(&recs[i]); err != nil {
			return metrics.Summary{}, err
		}
	}
	sum, err := rd.Finish()
	if err != nil || (ran == Ran{}) {
		return sum, err
	}
	sum.Collective, sum.DataPath = ran.Collective, ran.DataPath
	return sum, metrics.WriteSummary(rd.Path, sum)
}

// FormatSummary renders a summary for the terminal.
func FormatSummary(s metrics.Summary, stopReason string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %d ranks, %d rounds, %.1fs", s.Ranks, s.Rounds, s.WallS)
	if stopReason != "" {
		fmt.Fprintf(&b, " (%s)", stopReason)
	}
	b.WriteString("\n")
	if s.Collective != "" {
		fmt.Fprintf(&b, "  rounds ran over %s", s.Collective)
		if s.DataPath != "" {
			fmt.Fprintf(&b, " on %s", s.DataPath)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  final test accuracy %.4f (best %.4f, loss %.4f, %d evaluations)\n",
		s.FinalAccuracy, s.BestAccuracy, s.FinalLoss, s.Evaluations)
	b.WriteString("  time to accuracy:")
	for _, a := range metrics.AccuracyTargets() {
		k := metrics.TargetKey(a)
		if t, ok := s.TimeToAccuracy[k]; ok {
			fmt.Fprintf(&b, " %s→%.1fs", k, t)
		} else {
			fmt.Fprintf(&b, " %s→-", k)
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  throughput %.0f samples/s, traffic %.2f MB/s (sent %.2f, received %.2f)\n",
		s.Throughput, s.TrafficMBps, s.SentMBps, s.RecvMBps)
	b.WriteString("  computation ratio:")
	for _, p := range s.PerRank {
		fmt.Fprintf(&b, " r%d=%.2f", p.Rank, p.ComputationRatio)
	}
	fmt.Fprintf(&b, " (mean %.2f)\n", s.MeanComputation)
	return b.String()
}
