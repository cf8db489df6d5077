package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hetsync/hetsync/metrics"
)

// writeFigures draws the figures and returns their PNG file names (each has an SVG twin), in
// a fixed order: accuracy against time per shard kind (and heterogeneity, when it varies
// within one), throughput, traffic, computation ratio, ESync's computing ratio, the seconds
// each rank made the others wait (when the runs recorded it), and a timeline per run.
func writeFigures(out string, runs []Run, rep *Report) ([]string, error) {
	var figs []figure
	acc, err := accuracyFigures(runs, rep)
	if err != nil {
		return nil, err
	}
	figs = append(figs, acc...)
	configs := configurations(rep)
	perConfig := func(title, ylabel, format string, ymax float64, series []string, v func(Row) []float64) (figure, error) {
		b := bars{title: title, ylabel: ylabel, series: series, format: format, ymax: ymax}
		b.mean, b.err = make([][]float64, len(series)), make([][]float64, len(series))
		for _, c := range configs {
			b.labels = append(b.labels, c.label)
			for s := range series {
				var vs []float64
				for _, i := range c.rows {
					if x := v(rep.Rows[i]); s < len(x) && finite(x[s]) {
						vs = append(vs, x[s])
					}
				}
				m, e := math.NaN(), 0.0
				if len(vs) > 0 {
					ms := meanStd(vs)
					m, e = ms.Mean, ms.Std
				}
				b.mean[s] = append(b.mean[s], m)
				b.err[s] = append(b.err[s], e)
			}
		}
		_, drawOn, err := b.plot()
		return figure{draw: drawOn}, err
	}
	ranks := 0
	for _, r := range rep.Rows {
		for _, p := range r.PerRank {
			ranks = max(ranks, p.Rank+1)
		}
	}
	rankNames := make([]string, ranks)
	for i := range rankNames {
		rankNames[i] = "rank " + strconv.Itoa(i)
	}
	perRank := func(v func(metrics.RankSummary) float64) func(Row) []float64 {
		return func(r Row) []float64 {
			out := make([]float64, ranks)
			for i := range out {
				out[i] = math.NaN()
			}
			for _, p := range r.PerRank {
				out[p.Rank] = v(p)
			}
			return out
		}
	}
	one := []string{""}
	late, hasLate := madeOthersWait(runs, ranks)
	specs := []struct {
		name, title, ylabel, format string
		ymax                        float64
		series                      []string
		v                           func(Row) []float64
	}{
		{"throughput", "Data throughput", "samples / s (all ranks)", "%.0f", 0, one, func(r Row) []float64 { return []float64{r.Throughput} }},
		{"traffic", "Traffic load", "MB / s (sent + received, all ranks)", "%.2f", 0, one, func(r Row) []float64 { return []float64{r.TrafficMBps} }},
		{"computation_ratio", "Computation ratio per rank (compute / elapsed)", "computation ratio", "", 1, rankNames,
			perRank(func(p metrics.RankSummary) float64 { return p.ComputationRatio })},
		{"esync_computing_ratio", "ESync computing ratio per rank (1 - aggregate / elapsed)", "computing ratio", "", 1, rankNames,
			perRank(func(p metrics.RankSummary) float64 { return p.ESyncComputingRatio })},
	}
	if hasLate {
		specs = append(specs, struct {
			name, title, ylabel, format string
			ymax                        float64
			series                      []string
			v                           func(Row) []float64
		}{"made_others_wait", "Seconds each rank made the others wait (as the late rank of a collective)", "seconds waited for the rank", "", 0, rankNames,
			func(r Row) []float64 { return late[r.Name] }})
	}
	for _, s := range specs {
		f, err := perConfig(s.title, s.ylabel, s.format, s.ymax, s.series, s.v)
		if err != nil {
			return nil, err
		}
		f.name = s.name
		figs = append(figs, f)
	}
	for _, r := range runs {
		if f, ok := timelineFigure(r); ok {
			figs = append(figs, f)
		}
	}
	names := make([]string, 0, len(figs))
	for _, f := range figs {
		if err := f.save(out); err != nil {
			return nil, err
		}
		names = append(names, f.name+".png")
	}
	return names, nil
}

// config is one bar group of the bar figures: a run, or the runs that repeat one
// configuration with other seeds (a Group), drawn as their mean with an error bar of ± one
// standard deviation.
type config struct {
	label string
	rows  []int
}

func configurations(rep *Report) []config {
	groupOf := map[string]int{}
	for gi, g := range rep.Groups {
		for _, n := range g.Runs {
			groupOf[n] = gi
		}
	}
	var out []config
	at := map[int]int{} // group → its config
	for i, r := range rep.Rows {
		gi, in := groupOf[r.Name]
		if !in {
			out = append(out, config{label: r.Name, rows: []int{i}})
			continue
		}
		if c, ok := at[gi]; ok {
			out[c].rows = append(out[c].rows, i)
			continue
		}
		at[gi] = len(out)
		out = append(out, config{label: fmt.Sprintf("%s (%d seeds)", r.Name, len(rep.Groups[gi].Runs)), rows: []int{i}})
	}
	return out
}

// accuracyFigures draws test accuracy against time: one figure per shard kind, or per shard
// kind and heterogeneity when a shard kind's runs differ in it (a sweep of several
// heterogeneities over several seeds would draw dozens of curves in one figure).
func accuracyFigures(runs []Run, rep *Report) ([]figure, error) {
	type panel struct{ shard, hetero string }
	var panels []panel
	heteros := map[string]int{} // distinct heterogeneities per shard kind
	for _, r := range runs {
		p := panel{r.Setup.Shard, r.Setup.Hetero()}
		if !slices.Contains(panels, p) {
			panels = append(panels, p)
			heteros[p.shard]++
		}
	}
	var figs []figure
	for _, p := range panels {
		split := heteros[p.shard] > 1
		in := func(r Run) bool { return r.Setup.Shard == p.shard && (!split || r.Setup.Hetero() == p.hetero) }
		title := "Test accuracy against time"
		switch {
		case split:
			title += " (" + shardOr(p.shard) + ", " + p.hetero + ")"
		case p.shard != "":
			title += " (" + p.shard + ")"
		}
		var series []Series
		var strategies []string      // each series' strategy, for its legend entry
		seriesOf := map[string]int{} // a run's series

		var hlines []HLine
		targets := map[float64]bool{}
		repeats := map[string][]Run{} // the panel's runs by configuration less the seed
		for _, r := range runs {
			if in(r) {
				repeats[r.seedKey] = append(repeats[r.seedKey], r)
			}
		}
		for _, r := range runs {
			if !in(r) {
				continue
			}
			if group := repeats[r.seedKey]; len(group) > 1 {
				if group[0].Name == r.Name {
					series = append(series, acrossSeeds(group))
					strategies = append(strategies, r.Setup.Strategy)
				}
				seriesOf[r.Name] = len(series) - 1
			} else {
				s := Series{Name: r.Name}
				for _, e := range sortedEvals(r.Evals) {
					s.X = append(s.X, e.TimeS)
					s.Y = append(s.Y, e.Accuracy)
				}
				series = append(series, s)
				strategies = append(strategies, r.Setup.Strategy)
				seriesOf[r.Name] = len(series) - 1
			}
			if r.Setup.TargetAcc > 0 && !targets[r.Setup.TargetAcc] {
				targets[r.Setup.TargetAcc] = true
				hlines = append(hlines, HLine{Y: r.Setup.TargetAcc, Label: "target " + strconv.FormatFloat(r.Setup.TargetAcc, 'f', -1, 64)})
			}
		}
		nameByStrategy(series, strategies)
		// The baseline's tail accuracy minus a point, when the figure's runs share one
		// baseline, named as the baseline's curve is.
		var bases []string
		for i, row := range rep.Rows {
			if in(runs[i]) && row.BaselineRun != "" && !slices.Contains(bases, row.BaselineRun) {
				bases = append(bases, row.BaselineRun)
			}
		}
		if len(bases) == 1 {
			for _, row := range rep.Rows {
				if row.Name == bases[0] {
					name := row.Name
					if i, ok := seriesOf[row.Name]; ok {
						name = series[i].Name
					}
					hlines = append(hlines, HLine{Y: row.TailAcc - BaselineSlack, Label: name + " tail−0.01"})
				}
			}
		}
		ymin, ymax, _ := yRange(series, hlines, 0, 1)
		plt, err := lineChart(title, "training time (s)", "test accuracy", series, hlines, ymin, ymax)
		if err != nil {
			return nil, err
		}
		name := "accuracy_" + fileSafe(shardOr(p.shard))
		if split {
			name += "_" + slug(p.hetero)
		}
		figs = append(figs, single(name, plt))
	}
	return figs, nil
}

// nameByStrategy names each series of a figure after its strategy, which is what a reader
// compares (a run's name is often its directory's, "ssgd-ring-20250101-120000"): the
// strategy alone where it is the only series of that strategy, else with the series' own
// name after it. A series without a known strategy keeps its name.
func nameByStrategy(series []Series, strategies []string) {
	count := map[string]int{}
	for _, s := range strategies {
		count[s]++
	}
	for i := range series {
		st := strategies[i]
		switch {
		case st == "" || series[i].Name == st:
		case count[st] == 1 && strings.HasSuffix(series[i].Name, " seeds)"):
			series[i].Name = st + series[i].Name[strings.LastIndex(series[i].Name, " ("):]
		case count[st] == 1:
			series[i].Name = st
		default:
			series[i].Name = st + ": " + series[i].Name
		}
	}
}

// acrossSeeds is one curve for runs that repeat a configuration with other seeds: its k-th
// point is the mean time and mean accuracy of the runs' k-th evaluations (taken at the same
// round by each), with an error bar of ± one standard deviation of the accuracy, for every k
// that at least two runs reached.
func acrossSeeds(group []Run) Series {
	s := Series{Name: fmt.Sprintf("%s (%d seeds)", group[0].Name, len(group))}
	evals := make([][]metrics.EvalRecord, len(group))
	for i, r := range group {
		evals[i] = sortedEvals(r.Evals)
	}
	for k := 0; ; k++ {
		var ts, as []float64
		for _, ev := range evals {
			if k < len(ev) && finite(ev[k].Accuracy) {
				ts = append(ts, ev[k].TimeS)
				as = append(as, ev[k].Accuracy)
			}
		}
		if len(ts) < 2 {
			return s
		}
		acc := meanStd(as)
		s.X = append(s.X, meanStd(ts).Mean)
		s.Y = append(s.Y, acc.Mean)
		s.Err = append(s.Err, acc.Std)
	}
}

// madeOthersWait sums, per run and rank, the seconds the other ranks waited for that rank
// (over every rank's records naming it late), and reports whether any run recorded a late
// rank at all.
func madeOthersWait(runs []Run, ranks int) (map[string][]float64, bool) {
	out := map[string][]float64{}
	seen := false
	for _, r := range runs {
		sums := make([]float64, ranks)
		for i := range r.Rounds {
			lr, w := r.Rounds[i].LateRank, r.Rounds[i].LateWaitS
			if lr >= 0 && lr < ranks && finite(w) {
				sums[lr] += w
				seen = true
			}
		}
		out[r.Name] = sums
	}
	return out, seen
}

// Timeline layout: the bins a rank's rounds are averaged into, and the height of a rank's row.
const (
	timelineBins     = 200
	timelineRowPx    = 130
	timelineMinRowPx = 40
	timelineMaxPx    = 4000
	timelineExtraPx  = 110
	// timelineHeadroom is the y range over the highest stack, room for the legend.
	timelineHeadroom = 1.5
)

// Colours of the timeline's parts, the same in every row.
var (
	computeColour = color.RGBA{R: 0x4c, G: 0xaf, B: 0x50, A: 0xff}
	commColour    = color.RGBA{R: 0x21, G: 0x96, B: 0xf3, A: 0xff}
	waitColour    = color.RGBA{R: 0xe5, G: 0x39, B: 0x35, A: 0xff}
)

// timelineRowHeight is the height of a rank's row: timelineRowPx, less for jobs so large that
// the figure would pass timelineMaxPx, down to a row that still shows its stack.
func timelineRowHeight(ranks int) int {
	return max(timelineMinRowPx, min(timelineRowPx, (timelineMaxPx-timelineExtraPx)/max(1, ranks)))
}

// timelineFigure draws one run's rounds per rank: a row per rank with its compute,
// communication and wait seconds per round stacked over the rounds, on one y scale, so that
// the rank that computes longest and the ranks that wait for it stand out. Runs of many
// rounds are averaged into timelineBins bins. A run without records has no timeline.
func timelineFigure(r Run) (figure, bool) {
	byRank := map[int][]metrics.RoundRecord{}
	lastRound := 0
	for _, rec := range r.Rounds {
		byRank[rec.Rank] = append(byRank[rec.Rank], rec)
		lastRound = max(lastRound, rec.Round)
	}
	if len(byRank) == 0 {
		return figure{}, false
	}
	ranks := make([]int, 0, len(byRank))
	for rank := range byRank {
		ranks = append(ranks, rank)
	}
	slices.Sort(ranks)
	per := max(1, (lastRound+timelineBins)/timelineBins) // rounds per bin
	type stack struct{ compute, comm, wait plotter.XYs }
	stacks := make([]stack, len(ranks))
	top := 0.0
	for i, rank := range ranks {
		recs := byRank[rank]
		slices.SortFunc(recs, func(a, b metrics.RoundRecord) int { return cmp.Compare(a.Round, b.Round) })
		for lo := 0; lo < len(recs); {
			bin := recs[lo].Round / per
			hi := lo
			var c, m, w float64
			for ; hi < len(recs) && recs[hi].Round/per == bin; hi++ {
				c += recs[hi].ComputeS
				m += recs[hi].CommS
				w += recs[hi].WaitS
			}
			n := float64(hi - lo)
			x := float64(bin * per)
			stacks[i].compute = append(stacks[i].compute, plotter.XY{X: x, Y: c / n})
			stacks[i].comm = append(stacks[i].comm, plotter.XY{X: x, Y: (c + m) / n})
			stacks[i].wait = append(stacks[i].wait, plotter.XY{X: x, Y: (c + m + w) / n})
			top = max(top, (c+m+w)/n)
			lo = hi
		}
		// the last bin's step ends where its rounds do
		for _, xys := range []*plotter.XYs{&stacks[i].compute, &stacks[i].comm, &stacks[i].wait} {
			last := (*xys)[len(*xys)-1]
			*xys = append(*xys, plotter.XY{X: float64(recs[len(recs)-1].Round + 1), Y: last.Y})
		}
	}
	unit := "s per round"
	if per > 1 {
		unit = "s per round (mean of " + strconv.Itoa(per) + ")"
	}
	plots := make([][]*plot.Plot, len(ranks))
	for i, rank := range ranks {
		p := newPlot("", "", "rank "+strconv.Itoa(rank))
		if i == 0 {
			p.Title.Text = "Time per round, by rank: " + r.Name + " (" + unit + ")"
		}
		if i == len(ranks)-1 {
			p.X.Label.Text = "round"
		}
		for _, part := range []struct {
			name string
			xys  plotter.XYs
			c    color.RGBA
		}{{"wait", stacks[i].wait, waitColour}, {"communication", stacks[i].comm, commColour}, {"compute", stacks[i].compute, computeColour}} {
			l, err := plotter.NewLine(part.xys)
			if err != nil {
				continue // no finite point: the row stays empty
			}
			l.Color, l.FillColor, l.Width = part.c, part.c, vg.Points(0.5)
			l.StepStyle = plotter.PostStep
			p.Add(l)
			if i == 0 {
				p.Legend.Add(part.name, l)
			}
		}
		p.Legend.Top = true
		p.X.Min, p.X.Max = 0, float64(lastRound)+1
		// headroom above the highest stack for the legend of the first row
		p.Y.Min, p.Y.Max = 0, max(top*timelineHeadroom, 1e-3)
		plots[i] = []*plot.Plot{p}
	}
	height := timelineExtraPx + timelineRowHeight(len(ranks))*len(ranks)
	return figure{name: "timeline_" + fileSafe(r.Name), height: height, draw: func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: len(ranks), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
			PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
		cs := plot.Align(plots, tiles, dc)
		for i := range plots {
			plots[i][0].Draw(cs[i][0])
		}
	}}, true
}
