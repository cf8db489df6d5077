package report

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/hetsync/hetsync/metrics"
)

// TailFraction is the share of a run's evaluated time whose evaluations Row.TailAcc averages:
// the last tenth. A single final evaluation of a curve that swings by several points (SGD at
// a constant rate, by-class shards) says little about where the run ended; the mean over its
// last stretch is what "ends above" compares.
const TailFraction = 0.1

// tailAccuracy is the mean accuracy of the evaluations in the last TailFraction of the span
// from the first to the last evaluation (the last one at least); 0 when there are none, as
// the final accuracy then is.
func tailAccuracy(evals []metrics.EvalRecord) float64 {
	ev := sortedEvals(evals)
	if len(ev) == 0 {
		return 0
	}
	first, last := ev[0].TimeS, ev[len(ev)-1].TimeS
	from := last - TailFraction*(last-first)
	sum, n := 0.0, 0
	for _, e := range ev {
		if e.TimeS >= from {
			sum += e.Accuracy
			n++
		}
	}
	return sum / float64(n)
}

// Group is a set of runs that differ only in their seed: the same configuration repeated,
// summarised as the ESync paper's Table 1 is (mean ± std over runs).
type Group struct {
	// Runs names the runs, in report order; Seeds are theirs, in the same order.
	Runs     []string `json:"runs"`
	Seeds    []uint64 `json:"seeds"`
	Strategy string   `json:"strategy"`
	Shard    string   `json:"shard"`
	Hetero   string   `json:"hetero"`
	// TimeToAccuracy maps a target to the median time of the runs that reached it;
	// Reached counts them.
	TimeToAccuracy map[string]float64 `json:"time_to_accuracy_median"`
	Reached        map[string]int     `json:"reached"`
	// SpeedupTarget is the highest target at which every run of the group has a speedup
	// against its own baseline ("" when there is none); Speedup holds the median, min and max
	// of those speedups.
	SpeedupTarget string  `json:"speedup_target,omitempty"`
	Speedup       *Spread `json:"speedup,omitempty"`
	FinalAcc      MeanStd `json:"final_accuracy"`
	TailAcc       MeanStd `json:"tail_accuracy"`
	Throughput    MeanStd `json:"throughput_samples_per_s"`
	// BaselineTail is the median and range of the runs' t@baseline tail−0.01 ÷ baseline
	// time, over the BaselineTailN runs that reached it.
	BaselineTail  *Spread `json:"baseline_tail_time_ratio,omitempty"`
	BaselineTailN int     `json:"baseline_tail_reached,omitempty"`
	// Links is the median over the runs of their bytes per sample by class of link; absent
	// unless every run counted them.
	Links *LinkRates `json:"sent_by_link_per_sample_median,omitempty"`
}

// Spread is the median and the range of a few values.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// MeanStd is a sample mean and standard deviation (n−1; 0 for one value).
type MeanStd struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
}

// seedKey is the run's configuration without its seed and start time: runs with equal keys
// are repeats of one configuration. A config.json that does not parse as an object keys by
// the run's name (a group of one).
func seedKey(name string, config []byte) string {
	var m map[string]any
	if json.Unmarshal(config, &m) != nil || m == nil {
		return "run:" + name
	}
	delete(m, "seed")
	delete(m, "started")
	b, err := json.Marshal(m) // map keys marshal sorted: a canonical form
	if err != nil {
		return "run:" + name
	}
	return string(b)
}

// buildGroups groups rows by their runs' configuration less the seed and summarises every
// group of two runs or more, in the order of each group's first run.
func buildGroups(runs []Run, rows []Row, targets []string) []Group {
	var order []string
	members := map[string][]int{}
	for i, r := range runs {
		k := r.seedKey
		if k == "" {
			k = "run:" + r.Name
		}
		if members[k] == nil {
			order = append(order, k)
		}
		members[k] = append(members[k], i)
	}
	var out []Group
	for _, k := range order {
		idx := members[k]
		if len(idx) < 2 {
			continue
		}
		first := rows[idx[0]]
		g := Group{Strategy: first.Strategy, Shard: first.Shard, Hetero: first.Hetero,
			TimeToAccuracy: map[string]float64{}, Reached: map[string]int{}}
		var final, tail, thr, bf []float64
		for _, i := range idx {
			g.Runs = append(g.Runs, rows[i].Name)
			g.Seeds = append(g.Seeds, runs[i].Setup.Seed)
			final = append(final, rows[i].FinalAcc)
			tail = append(tail, rows[i].TailAcc)
			thr = append(thr, rows[i].Throughput)
			if rows[i].BaselineTailRatio != nil {
				bf = append(bf, *rows[i].BaselineTailRatio)
			}
		}
		for _, t := range targets {
			var ts []float64
			for _, i := range idx {
				if v, ok := rows[i].TimeToAccuracy[t]; ok {
					ts = append(ts, v)
				}
			}
			if len(ts) > 0 {
				g.TimeToAccuracy[t] = median(ts)
				g.Reached[t] = len(ts)
			}
		}
		for _, t := range slices.Backward(targets) {
			var sp []float64
			for _, i := range idx {
				if v, ok := rows[i].Speedups[t]; ok {
					sp = append(sp, v)
				}
			}
			if len(sp) == len(idx) {
				g.SpeedupTarget = t
				g.Speedup = &Spread{Median: median(sp), Min: slices.Min(sp), Max: slices.Max(sp)}
				break
			}
		}
		g.FinalAcc, g.TailAcc, g.Throughput = meanStd(final), meanStd(tail), meanStd(thr)
		g.Links = medianRates(rows, idx)
		if len(bf) > 0 {
			g.BaselineTail = &Spread{Median: median(bf), Min: slices.Min(bf), Max: slices.Max(bf)}
			g.BaselineTailN = len(bf)
		}
		out = append(out, g)
	}
	return out
}

// median of a non-empty slice (the mean of the middle two for an even count).
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func meanStd(v []float64) MeanStd {
	if len(v) == 0 {
		return MeanStd{}
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	m := sum / float64(len(v))
	if len(v) == 1 {
		return MeanStd{Mean: m}
	}
	ss := 0.0
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return MeanStd{Mean: m, Std: math.Sqrt(ss / float64(len(v)-1))}
}

// groupsMarkdown renders the groups as the report's "Across seeds" section ("" when none).
func groupsMarkdown(groups []Group, targets []string) string {
	if len(groups) == 0 {
		return ""
	}
	// only the targets some group reached
	var shown []string
	for _, t := range targets {
		for _, g := range groups {
			if g.Reached[t] > 0 {
				shown = append(shown, t)
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Across seeds\n\nRuns whose configurations differ only in the seed, summarised: the median time to each target over the runs that reached it (how many of them did), the median and range of the runs' speedups against their own seed's baseline at the highest target all of them reached and of their t@baseline tail−0.01 ÷ baseline time, and mean ± std of the final accuracy, of the tail accuracy (the mean of the evaluations in the last %.0f%% of the run) and of the throughput.\n\n", 100*TailFraction)
	b.WriteString("| runs | strategy | shard | heterogeneity | seeds |")
	for _, t := range shown {
		fmt.Fprintf(&b, " t@%s (s) |", t)
	}
	b.WriteString(" speedup median [min–max] | ÷ baseline time median [min–max] | final acc | tail acc | samples/s |\n|---|---|---|---|---|")
	for range shown {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|---:|---:|---:|\n")
	for _, g := range groups {
		seeds := make([]string, len(g.Seeds))
		for i, s := range g.Seeds {
			seeds[i] = strconv.FormatUint(s, 10)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |", mdEscape(strings.Join(g.Runs, ", ")), mdEscape(g.Strategy),
			mdEscape(g.Shard), mdEscape(g.Hetero), strings.Join(seeds, ","))
		for _, t := range shown {
			if n := g.Reached[t]; n > 0 {
				fmt.Fprintf(&b, " %.1f (%d/%d) |", g.TimeToAccuracy[t], n, len(g.Runs))
			} else {
				fmt.Fprintf(&b, " - (0/%d) |", len(g.Runs))
			}
		}
		if g.Speedup != nil {
			fmt.Fprintf(&b, " %.2f× [%.2f–%.2f] @%s |", g.Speedup.Median, g.Speedup.Min, g.Speedup.Max, g.SpeedupTarget)
		} else {
			b.WriteString(" - |")
		}
		if g.BaselineTail != nil {
			fmt.Fprintf(&b, " %.2f [%.2f–%.2f] (%d/%d) |", g.BaselineTail.Median, g.BaselineTail.Min, g.BaselineTail.Max, g.BaselineTailN, len(g.Runs))
		} else {
			b.WriteString(" - |")
		}
		fmt.Fprintf(&b, " %.4f ± %.4f | %.4f ± %.4f | %.0f ± %.0f |\n", g.FinalAcc.Mean, g.FinalAcc.Std,
			g.TailAcc.Mean, g.TailAcc.Std, g.Throughput.Mean, g.Throughput.Std)
	}
	return b.String()
}
