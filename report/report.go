package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hetsync/hetsync/metrics"
)

// Files a report writes into its output directory (figures are listed in Report.Figures).
const (
	MarkdownFile = "report.md"
	SummaryFile  = "summary.json"
)

// Report is the comparison of a set of runs.
type Report struct {
	// Baseline is the --baseline run name, or "" for the default (ssgd per scenario).
	Baseline string   `json:"baseline,omitempty"`
	Targets  []string `json:"targets"`
	Rows     []Row    `json:"runs"`
	// Groups summarise the runs that repeat one configuration with other seeds.
	Groups []Group `json:"groups,omitempty"`
	// Figures are the PNG files written, relative to the output directory.
	Figures []string `json:"figures,omitempty"`
}

// Row is one run of a report.
type Row struct {
	Name     string `json:"name"`
	Dir      string `json:"dir"`
	Strategy string `json:"strategy"`
	Shard    string `json:"shard"`
	Hetero   string `json:"hetero"`
	Ranks    int    `json:"ranks"`
	// TimeToAccuracy maps a target ("0.80") to seconds; targets never reached are absent.
	TimeToAccuracy map[string]float64 `json:"time_to_accuracy"`
	// BaselineRun names the run the speedups compare against ("" when there is none).
	BaselineRun string `json:"baseline_run,omitempty"`
	// Speedups maps each target both runs reached to TTA(baseline) ÷ TTA(run).
	Speedups map[string]float64 `json:"speedups,omitempty"`
	// SpeedupTarget is the highest target both reached, the one the table shows.
	SpeedupTarget string `json:"speedup_target,omitempty"`
	// TimeToBaselineTail is when the run first reached its baseline's tail accuracy (its
	// converged accuracy) minus one point (Sync-Switch's criterion: converged to BSP's
	// accuracy), absent when never;
	// BaselineTailRatio is that time ÷ the baseline's wall time.
	TimeToBaselineTail *float64 `json:"time_to_baseline_tail_s,omitempty"`
	BaselineTailRatio  *float64 `json:"baseline_tail_time_ratio,omitempty"`
	FinalAcc           float64  `json:"final_accuracy"`
	// TailAcc is the mean accuracy over the last TailFraction of the run's evaluations.
	TailAcc     float64 `json:"tail_accuracy"`
	BestAcc     float64 `json:"best_accuracy"`
	Evaluations int     `json:"evaluations"`
	WallS       float64 `json:"wall_s"`
	Throughput  float64 `json:"throughput_samples_per_s"`
	TrafficMBps float64 `json:"traffic_mb_per_s"`
	// EndedEarly says where and why the run ended before its stop rule (its numbers cover
	// what it measured until then); absent when it ran to its end.
	EndedEarly *metrics.EarlyEnd `json:"ended_early,omitempty"`
	// Links is what the run's ranks sent by class of link; absent for a run that did not
	// count it.
	Links *LinkTraffic `json:"sent_by_link,omitempty"`
	// PerRank has each rank's computation ratios (compute ÷ elapsed, and ESync's
	// 1 − aggregate ÷ elapsed) and times.
	PerRank []metrics.RankSummary `json:"per_rank"`
}

// Speedup is the table's speedup (at SpeedupTarget), NaN when there is none.
func (r Row) Speedup() float64 {
	if v, ok := r.Speedups[r.SpeedupTarget]; ok {
		return v
	}
	return math.NaN()
}

// Build compares runs. baseline names the run every speedup is against; "" picks, per
// scenario, the first run whose strategy is ssgd (package doc). A baseline name that is not
// a run is an error listing the runs.
func Build(runs []Run, baseline string) (*Report, error) {
	rep := &Report{Baseline: baseline}
	for _, a := range metrics.AccuracyTargets() {
		rep.Targets = append(rep.Targets, metrics.TargetKey(a))
	}
	byName := map[string]*Run{}
	names := make([]string, len(runs))
	for i := range runs {
		byName[runs[i].Name] = &runs[i]
		names[i] = runs[i].Name
	}
	if baseline != "" && byName[baseline] == nil {
		return nil, fmt.Errorf("report: --baseline %q is not one of the runs (%s)", baseline, strings.Join(names, ", "))
	}
	defaults := map[string]*Run{} // scenario → its first ssgd run
	for i := range runs {
		k := runs[i].Setup.scenario()
		if defaults[k] == nil && runs[i].Setup.Strategy == "ssgd" {
			defaults[k] = &runs[i]
		}
	}
	tails := make(map[*Run]float64, len(runs)) // each run's tail accuracy, computed once
	for i := range runs {
		tails[&runs[i]] = tailAccuracy(runs[i].Evals)
	}
	for i := range runs {
		r := &runs[i]
		s := r.Summary
		row := Row{
			Name: r.Name, Dir: r.Dir, Strategy: r.Setup.Strategy, Shard: r.Setup.Shard,
			Hetero: r.Setup.Hetero(), Ranks: r.Setup.Ranks, TimeToAccuracy: s.TimeToAccuracy,
			FinalAcc: s.FinalAccuracy, TailAcc: tails[r], BestAcc: s.BestAccuracy, Evaluations: s.Evaluations,
			WallS: s.WallS, Throughput: s.Throughput, TrafficMBps: s.TrafficMBps, PerRank: s.PerRank,
			EndedEarly: r.EndedEarly, Links: linkTraffic(s),
		}
		if row.TimeToAccuracy == nil {
			row.TimeToAccuracy = map[string]float64{}
		}
		base := defaults[r.Setup.scenario()]
		if baseline != "" {
			base = byName[baseline]
		}
		if base != nil {
			row.BaselineRun = base.Name
			if t, ok := firstReaching(r.Evals, tails[base]-BaselineSlack); ok && base.Summary.WallS > 0 {
				ratio := t / base.Summary.WallS
				row.TimeToBaselineTail, row.BaselineTailRatio = &t, &ratio
			}
			for _, k := range rep.Targets {
				tb, okb := base.Summary.TimeToAccuracy[k]
				tr, okr := s.TimeToAccuracy[k]
				if okb && okr && tr > 0 {
					if row.Speedups == nil {
						row.Speedups = map[string]float64{}
					}
					row.Speedups[k] = tb / tr
					row.SpeedupTarget = k
				}
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Groups = buildGroups(runs, rep.Rows, rep.Targets)
	return rep, nil
}

// BaselineSlack is how far below its baseline's tail accuracy a run may be and count as
// having reached it (TimeToBaselineTail): one point, as in Sync-Switch's evaluation.
const BaselineSlack = 0.01

// firstReaching returns the time of the first evaluation (in time order) at or above acc.
func firstReaching(evals []metrics.EvalRecord, acc float64) (float64, bool) {
	for _, e := range sortedEvals(evals) {
		if e.Accuracy >= acc-1e-12 {
			return e.TimeS, true
		}
	}
	return 0, false
}

// Markdown renders the report as markdown: the comparison table, then per-rank times and
// computation ratios.
func (rep *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Run comparison\n\n")
	if rep.Baseline != "" {
		fmt.Fprintf(&b, "Speedup = time to accuracy of run `%s` ÷ that of the run, at the highest target both reached. t@baseline tail−0.01 is when the run first reached the baseline's tail accuracy (the mean of its last tenth of evaluations, its converged accuracy) minus one point; ÷ baseline time divides it by the baseline's wall time.\n\n", rep.Baseline)
	} else {
		b.WriteString("Speedup = time to accuracy of the first ssgd run of the same scenario (model, ranks, seed, shard, heterogeneity) ÷ that of the run, at the highest target both reached. t@baseline tail−0.01 is when the run first reached its baseline's tail accuracy (the mean of its last tenth of evaluations, its converged accuracy) minus one point; ÷ baseline time divides it by the baseline's wall time.\n\n")
	}
	for _, r := range rep.Rows {
		if r.EndedEarly != nil {
			fmt.Fprintf(&b, "Run `%s` %s: its numbers cover what it measured until then.\n\n", r.Name, r.EndedEarly)
		}
	}
	b.WriteString("| run | strategy | shard | heterogeneity |")
	for _, k := range rep.Targets {
		fmt.Fprintf(&b, " t@%s (s) |", k)
	}
	b.WriteString(" speedup | baseline | t@baseline tail−0.01 (s) | ÷ baseline time | final acc | tail acc | best acc | samples/s | traffic MB/s | compute ratio (per rank) | ESync ratio (per rank) |\n|---|---|---|---|")
	for range rep.Targets {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |", mdEscape(r.Name), mdEscape(r.Strategy), mdEscape(r.Shard), mdEscape(r.Hetero))
		for _, k := range rep.Targets {
			if t, ok := r.TimeToAccuracy[k]; ok {
				fmt.Fprintf(&b, " %.1f |", t)
			} else {
				b.WriteString(" - |")
			}
		}
		if sp := r.Speedup(); !math.IsNaN(sp) {
			fmt.Fprintf(&b, " %.2f× @%s |", sp, r.SpeedupTarget)
		} else {
			b.WriteString(" - |")
		}
		base := r.BaselineRun
		if base == "" {
			base = "-"
		}
		if r.TimeToBaselineTail != nil {
			fmt.Fprintf(&b, " %s | %.1f | %.2f |", mdEscape(base), *r.TimeToBaselineTail, *r.BaselineTailRatio)
		} else {
			fmt.Fprintf(&b, " %s | - | - |", mdEscape(base))
		}
		fmt.Fprintf(&b, " %.4f | %.4f | %.4f | %.0f | %.2f | %s | %s |\n", r.FinalAcc, r.TailAcc, r.BestAcc,
			r.Throughput, r.TrafficMBps, ratios(r.PerRank, false), ratios(r.PerRank, true))
	}
	b.WriteString(groupsMarkdown(rep.Groups, rep.Targets))
	b.WriteString(linksMarkdown(rep.Rows, rep.Groups))
	b.WriteString("\n## Per rank\n\n")
	b.WriteString("| run | rank | rounds | samples | elapsed (s) | compute (s) | comm (s) | wait (s) | compute ratio | ESync ratio |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Rows {
		for _, p := range r.PerRank {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f |\n", mdEscape(r.Name), p.Rank,
				p.Rounds, p.Samples, p.ElapsedS, p.ComputeS, p.CommS, p.WaitS, p.ComputationRatio, p.ESyncComputingRatio)
		}
	}
	if len(rep.Figures) > 0 {
		b.WriteString("\n## Figures\n\n")
		for _, f := range rep.Figures {
			fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(f, ".png"), f)
		}
	}
	return b.String()
}

// ratios prints per-rank ratios as "0.95 / 0.93 / 0.61".
func ratios(ps []metrics.RankSummary, esync bool) string {
	if len(ps) == 0 {
		return "-"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		v := p.ComputationRatio
		if esync {
			v = p.ESyncComputingRatio
		}
		parts[i] = strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strings.Join(parts, " / ")
}

// mdEscape keeps a table cell in its cell.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// Write loads the run directories, builds the report and writes report.md, summary.json and
// the figures into out (created if needed). It returns the report.
func Write(out string, dirs []string, baseline string) (*Report, error) {
	runs, err := LoadRuns(dirs)
	if err != nil {
		return nil, err
	}
	if err := checkOut(out); err != nil {
		return nil, err
	}
	rep, err := Build(runs, baseline)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	figs, err := writeFigures(out, runs, rep)
	if err != nil {
		return nil, err
	}
	rep.Figures = figs
	if err := os.WriteFile(filepath.Join(out, MarkdownFile), []byte(rep.Markdown()), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("report: encoding %s: %w", SummaryFile, err)
	}
	if err := os.WriteFile(filepath.Join(out, SummaryFile), append(js, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return rep, nil
}

// checkOut refuses to write the report into a run directory (one of the runs reported on, or
// any other), where its summary.json would replace the run's own.
func checkOut(out string) error {
	if _, err := os.Stat(filepath.Join(out, metrics.ConfigFile)); err == nil {
		return fmt.Errorf("report: --out %s is a run directory (it holds %s): the report's %s would replace the run's; choose another directory",
			out, metrics.ConfigFile, SummaryFile)
	}
	return nil
}

// slug turns a description into a file-name part: every run of characters other than
// letters, digits, '.' and '_' becomes one '-' ("stragglers 1,2 +10ms at 1s" →
// "stragglers-1-2-10ms-at-1s").
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}

func shardOr(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// sortedEvals returns the evaluations in time order (ties by round).
func sortedEvals(ev []metrics.EvalRecord) []metrics.EvalRecord {
	out := slices.Clone(ev)
	slices.SortStableFunc(out, func(a, b metrics.EvalRecord) int {
		switch {
		case a.TimeS < b.TimeS:
			return -1
		case a.TimeS > b.TimeS:
			return 1
		}
		return a.Round - b.Round
	})
	return out
}
