package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/metrics"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeRun describes a hand-made run directory.
type fakeRun struct {
	name, strategy, shard string
	seed                  int // 0 means 1
	slowdown              []float64
	target                float64
	// evals are (time_s, accuracy) pairs.
	evals [][2]float64
	// compute, comm, wait are per-rank totals, spread over two rounds.
	compute, comm, wait []float64
	elapsed             float64
	samples             int
	bytes               int64
	// sent is every rank's bytes by class of link in each round; the zero value writes none.
	sent metrics.LinkBytes
}

// writeFakeRun writes config.json, metrics.jsonl and eval.jsonl the way the trainer does.
func writeFakeRun(t *testing.T, root string, f fakeRun) string {
	t.Helper()
	dir := filepath.Join(root, f.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"strategy": f.strategy, "collective": "ring", "model": "mlp", "shard": f.shard,
		"seed": max(1, f.seed), "started": "2026-11-22T00:00:0" + fmt.Sprint(f.seed%10) + "Z", "ranks": len(f.compute), "transport": "mem", "esync": map[string]any{"local_lr": 0.05}}
	if f.slowdown != nil {
		cfg["slowdown"] = f.slowdown
	}
	if f.target > 0 {
		cfg["target_acc"] = f.target
	}
	js, _ := json.MarshalIndent(cfg, "", "  ")
	write(t, filepath.Join(dir, "config.json"), string(js))
	var m strings.Builder
	for r := range f.compute {
		for round := range 2 {
			t := f.elapsed * float64(round+1) / 2
			rec := metrics.RoundRecord{Rank: r, Round: round, TimeS: t, Samples: f.samples / 2, ComputeS: f.compute[r] / 2,
				CommS: f.comm[r] / 2, WaitS: f.wait[r] / 2, BytesSent: f.bytes / 2, BytesRecv: f.bytes / 2, Loss: 0.5, LocalSteps: 1,
				LateRank: -1, Sent: f.sent, Extra: []metrics.Field{{Key: "staleness", Value: float64(r)}}}
			m.Write(rec.AppendJSON(nil))
			m.WriteByte('\n')
		}
	}
	write(t, filepath.Join(dir, "metrics.jsonl"), m.String())
	var e strings.Builder
	for i, ev := range f.evals {
		fmt.Fprintf(&e, `{"time_s":%g,"round":%d,"accuracy":%g,"loss":%g}`+"\n", ev[0], i*10, ev[1], 1-ev[1])
	}
	write(t, filepath.Join(dir, "eval.jsonl"), e.String())
	return dir
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeRuns is a small experiment: three iid strategies under slowdown 1,1,2,4 and two
// by-class runs.
func fakeRuns() []fakeRun {
	slow := []float64{1, 1, 2, 4}
	return []fakeRun{
		{name: "ssgd", strategy: "ssgd", shard: "iid", slowdown: slow, target: 0.8,
			evals:   [][2]float64{{5, 0.6}, {10, 0.72}, {20, 0.78}, {40, 0.81}},
			compute: []float64{10, 10, 20, 38}, comm: []float64{2, 2, 2, 2}, wait: []float64{28, 28, 18, 0},
			elapsed: 40, samples: 4000, bytes: 8_000_000},
		{name: "esync", strategy: "esync", shard: "iid", slowdown: slow, target: 0.8,
			evals:   [][2]float64{{2, 0.65}, {5, 0.76}, {8, 0.801}, {10, 0.805}},
			compute: []float64{9, 9, 9, 9}, comm: []float64{0.5, 0.5, 0.5, 0.5}, wait: []float64{0.5, 0.5, 0.5, 0.5},
			elapsed: 10, samples: 6000, bytes: 2_000_000},
		{name: "asgd", strategy: "asgd", shard: "iid", slowdown: slow, target: 0.8,
			evals:   [][2]float64{{3, 0.7}, {9, 0.79}, {12, 0.8}},
			compute: []float64{11, 11, 11, 11}, comm: []float64{1, 1, 1, 1}, wait: []float64{0, 0, 0, 0},
			elapsed: 12, samples: 7000, bytes: 12_000_000},
		{name: "ssgd-byclass", strategy: "ssgd", shard: "by-class", slowdown: slow,
			evals:   [][2]float64{{10, 0.5}, {30, 0.71}},
			compute: []float64{7, 7, 15, 29}, comm: []float64{1, 1, 1, 1}, wait: []float64{22, 22, 14, 0},
			elapsed: 30, samples: 3000, bytes: 6_000_000},
		{name: "esync-byclass", strategy: "esync", shard: "by-class", slowdown: slow,
			evals:   [][2]float64{{4, 0.55}, {10, 0.73}},
			compute: []float64{9, 9, 9, 9}, comm: []float64{0.5, 0.5, 0.5, 0.5}, wait: []float64{0.5, 0.5, 0.5, 0.5},
			elapsed: 10, samples: 6000, bytes: 2_000_000},
	}
}

func writeFakeRuns(t *testing.T) []string {
	root := t.TempDir()
	var dirs []string
	for _, f := range fakeRuns() {
		dirs = append(dirs, writeFakeRun(t, root, f))
	}
	return dirs
}

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, path, got)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestMarkdownGolden(t *testing.T) {
	tests := []struct {
		name, baseline, golden string
	}{
		{"default baseline per scenario", "", "report_default.md"},
		{"named baseline", "asgd", "report_asgd.md"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs, err := LoadRuns(writeFakeRuns(t))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Build(runs, tc.baseline)
			if err != nil {
				t.Fatal(err)
			}
			md := rep.Markdown()
			// Directories are temporary; the markdown must not depend on them.
			golden(t, tc.golden, md)
		})
	}
}

func TestSpeedups(t *testing.T) {
	runs, err := LoadRuns(writeFakeRuns(t))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Build(runs, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		run, base, target string
		speedup           float64
	}{
		{"ssgd", "ssgd", "0.80", 1},
		{"esync", "ssgd", "0.80", 40.0 / 8},
		{"asgd", "ssgd", "0.80", 40.0 / 12},
		{"ssgd-byclass", "ssgd-byclass", "0.70", 1},
		{"esync-byclass", "ssgd-byclass", "0.70", 30.0 / 10},
	}
	for i, tc := range tests {
		r := rep.Rows[i]
		if r.Name != tc.run || r.BaselineRun != tc.base || r.SpeedupTarget != tc.target || math.Abs(r.Speedup()-tc.speedup) > 1e-9 {
			t.Errorf("row %d: %s vs %s: %.4f @%s, want %s vs %s: %.4f @%s", i, r.Name, r.BaselineRun, r.Speedup(), r.SpeedupTarget,
				tc.run, tc.base, tc.speedup, tc.target)
		}
	}
	// esync: 0.70 at 5 s against ssgd's 10 s.
	if got := rep.Rows[1].Speedups["0.70"]; got != 2 {
		t.Errorf("esync speedup at 0.70 = %v, want 2", got)
	}
}

func TestBuildErrors(t *testing.T) {
	dirs := writeFakeRuns(t)
	runs, err := LoadRuns(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(runs, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "esync-byclass") {
		t.Errorf("unknown baseline: err = %v, want one naming it and the runs", err)
	}
	tests := []struct {
		name string
		dirs []string
		want string
	}{
		{"no runs", nil, "no run directories"},
		{"missing dir", []string{filepath.Join(t.TempDir(), "absent")}, "config.json"},
		{"duplicate names", []string{dirs[0], dirs[0]}, "same name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadRuns(tc.dirs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	bad := t.TempDir()
	write(t, filepath.Join(bad, "config.json"), "{}")
	write(t, filepath.Join(bad, "metrics.jsonl"), "{\"rank\":0,\"round\":0}\nnot json\n")
	if _, err := LoadRun(bad); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:2") {
		t.Errorf("corrupt metrics: err = %v, want one naming metrics.jsonl:2", err)
	}
}

// TestWriteFigures checks the files a report writes: the markdown and summary.json, and
// PNGs of the expected size with more than background and axes in them.
func TestWriteFigures(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	if dir := os.Getenv("HETSYNC_REPORT_KEEP"); dir != "" {
		out = dir // to look at the figures
	}
	rep, err := Write(out, writeFakeRuns(t), "")
	if err != nil {
		t.Fatal(err)
	}
	wantFigs := []string{"accuracy_iid.png", "accuracy_by-class.png", "throughput.png", "traffic.png",
		"computation_ratio.png", "esync_computing_ratio.png",
		"timeline_ssgd.png", "timeline_esync.png", "timeline_asgd.png", "timeline_ssgd-byclass.png", "timeline_esync-byclass.png"}
	if strings.Join(rep.Figures, " ") != strings.Join(wantFigs, " ") {
		t.Errorf("figures %v, want %v", rep.Figures, wantFigs)
	}
	for _, name := range wantFigs {
		height := FigureHeight
		if strings.HasPrefix(name, "timeline_") {
			height = timelineExtraPx + 4*timelineRowPx // four ranks
		}
		checkFigure(t, out, name, height)
	}
	md, err := os.ReadFile(filepath.Join(out, MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "![throughput](throughput.png)") {
		t.Errorf("report.md does not link the figures:\n%s", md)
	}
	var back Report
	js, err := os.ReadFile(filepath.Join(out, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 5 || back.Rows[1].Speedups["0.80"] != 5 || len(back.Rows[1].PerRank) != 4 {
		t.Errorf("summary.json round trip: %+v", back.Rows)
	}
}

// buildReport loads the run directories and builds their report with the default baselines.
func buildReport(t *testing.T, dirs []string) *Report {
	t.Helper()
	runs, err := LoadRuns(dirs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Build(runs, "")
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkFigure checks that the figure's PNG has the given size and more than background, axes
// and text in it, and that its SVG twin is well-formed XML with the data's paths and the
// labels' text.
func checkFigure(t *testing.T, out, name string, height int) {
	t.Helper()
	img := readPNG(t, filepath.Join(out, name))
	if got := img.Bounds(); got != image.Rect(0, 0, FigureWidth, height) {
		t.Errorf("%s: bounds %v, want %dx%d", name, got, FigureWidth, height)
	}
	if n := colouredPixels(img); n < 2000 {
		t.Errorf("%s: only %d coloured pixels; the data is not drawn", name, n)
	}
	svg := strings.TrimSuffix(name, ".png") + ".svg"
	f, err := os.Open(filepath.Join(out, svg))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	var texts []string
	dec := xml.NewDecoder(f)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", svg, err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			counts[tk.Name.Local]++
		case xml.CharData:
			if s := strings.TrimSpace(string(tk)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if counts["svg"] != 1 || counts["path"] < 10 || counts["text"] < 5 {
		t.Errorf("%s: elements %v, want one svg with ≥ 10 paths and ≥ 5 texts", svg, counts)
	}
	if !strings.Contains(strings.Join(texts, " "), "rank") && !strings.Contains(strings.Join(texts, " "), "accuracy") && !strings.Contains(strings.Join(texts, " "), "/ s") {
		t.Errorf("%s: no axis label among its texts %q", svg, texts)
	}
}

// readPNG decodes the PNG file at path.
func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// colouredPixels counts pixels that are neither grey (background, text, axes, grid) nor
// white: the plotted data.
func colouredPixels(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if max(r, g, bl)-min(r, g, bl) > 0x2000 {
				n++
			}
		}
	}
	return n
}

func TestHetero(t *testing.T) {
	tests := []struct {
		config, want string
	}{
		{`{}`, "none"},
		{`{"slowdown":[1,1,2.5,4]}`, "slowdown 1,1,2.5,4"},
		{`{"step_sleep":[0,20000000]}`, "sleep 0s,20ms"},
		{`{"stragglers":{}}`, "none"},
		{`{"slowdown":[1,2],"stragglers":{"ranks":[1,2],"delay":30000000,"at":[3000000000,10000000000],"for":5000000000}}`,
			"slowdown 1,2; stragglers 1,2 +30ms at 3s,10s for 5s"},
		{`{"stragglers":{"ranks":[1],"delay":10000000,"at":[1000000000],"for":2000000000,"mode":"compute"}}`,
			"stragglers 1 +10ms at 1s for 2s (compute)"},
	}
	for _, tc := range tests {
		var s Setup
		if err := json.Unmarshal([]byte(tc.config), &s); err != nil {
			t.Fatal(err)
		}
		if got := s.Hetero(); got != tc.want {
			t.Errorf("Hetero(%s) = %q, want %q", tc.config, got, tc.want)
		}
	}
}

func TestTailAccuracy(t *testing.T) {
	ev := func(pairs ...[2]float64) []metrics.EvalRecord {
		var out []metrics.EvalRecord
		for i, p := range pairs {
			out = append(out, metrics.EvalRecord{TimeS: p[0], Round: i, Accuracy: p[1]})
		}
		return out
	}
	tests := []struct {
		name  string
		evals []metrics.EvalRecord
		want  float64
	}{
		{"none", nil, 0},
		{"one", ev([2]float64{3, 0.7}), 0.7},
		// span 0..10: the last tenth is t ≥ 9
		{"last tenth", ev([2]float64{0, 0.1}, [2]float64{5, 0.5}, [2]float64{8.9, 0.9}, [2]float64{9, 0.6}, [2]float64{10, 0.8}), 0.7},
		// out of time order in the file
		{"unsorted", ev([2]float64{10, 0.8}, [2]float64{0, 0.1}, [2]float64{9.5, 0.4}), 0.6},
	}
	for _, tc := range tests {
		if got := tailAccuracy(tc.evals); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: tail accuracy %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGroupsAcrossSeeds checks that runs differing only in the seed are summarised together,
// each speedup against its own seed's baseline, and that a run alone makes no group.
func TestGroupsAcrossSeeds(t *testing.T) {
	slow := []float64{1, 1, 2, 4}
	run := func(name, strategy string, seed int, evals ...[2]float64) fakeRun {
		return fakeRun{name: name, strategy: strategy, shard: "iid", seed: seed, slowdown: slow, target: 0.8, evals: evals,
			compute: []float64{1, 1, 1, 1}, comm: []float64{1, 1, 1, 1}, wait: []float64{0, 0, 0, 0},
			elapsed: 20, samples: 1000, bytes: 1000}
	}
	root := t.TempDir()
	var dirs []string
	for _, f := range []fakeRun{
		run("ssgd-s1", "ssgd", 1, [2]float64{10, 0.7}, [2]float64{20, 0.8}),
		run("esync-s1", "esync", 1, [2]float64{5, 0.7}, [2]float64{10, 0.8}),
		run("ssgd-s2", "ssgd", 2, [2]float64{12, 0.7}, [2]float64{24, 0.8}),
		run("esync-s2", "esync", 2, [2]float64{4, 0.7}, [2]float64{8, 0.82}),
		run("asgd-s1", "asgd", 1, [2]float64{3, 0.7}, [2]float64{6, 0.81}),
		run("esync-s3", "esync", 3, [2]float64{6, 0.72}),
	} {
		dirs = append(dirs, writeFakeRun(t, root, f))
	}
	rep := buildReport(t, dirs)
	if len(rep.Groups) != 2 {
		t.Fatalf("%d groups, want 2 (ssgd, esync): %+v", len(rep.Groups), rep.Groups)
	}
	ss, es := rep.Groups[0], rep.Groups[1]
	if strings.Join(ss.Runs, ",") != "ssgd-s1,ssgd-s2" || strings.Join(es.Runs, ",") != "esync-s1,esync-s2,esync-s3" {
		t.Fatalf("groups %v and %v", ss.Runs, es.Runs)
	}
	if fmt.Sprint(es.Seeds) != "[1 2 3]" {
		t.Errorf("esync seeds %v, want [1 2 3]", es.Seeds)
	}
	// esync-s3 has no baseline of its seed: no speedup common to all three
	if es.Speedup != nil {
		t.Errorf("esync group speedup %+v, want none (esync-s3 has no ssgd of its seed)", es.Speedup)
	}
	if es.Reached["0.80"] != 2 || es.TimeToAccuracy["0.80"] != 9 || es.Reached["0.70"] != 3 || es.TimeToAccuracy["0.70"] != 5 {
		t.Errorf("esync times %v reached %v, want 0.80 median 9 (2 of 3), 0.70 median 5 (3 of 3)", es.TimeToAccuracy, es.Reached)
	}
	if ss.Speedup == nil || ss.SpeedupTarget != "0.80" || ss.Speedup.Median != 1 {
		t.Errorf("ssgd group speedup %+v @%s, want 1 @0.80", ss.Speedup, ss.SpeedupTarget)
	}
	if math.Abs(ss.FinalAcc.Mean-0.8) > 1e-12 || ss.FinalAcc.Std != 0 {
		t.Errorf("ssgd final %+v, want 0.8 ± 0", ss.FinalAcc)
	}
	// without esync-s3, the esync group's speedups are 20/10 and 24/8
	rep = buildReport(t, dirs[:4])
	es = rep.Groups[1]
	if es.Speedup == nil || es.Speedup.Median != 2.5 || es.Speedup.Min != 2 || es.Speedup.Max != 3 {
		t.Errorf("esync speedups %+v, want median 2.5 in [2, 3]", es.Speedup)
	}
	if sd := math.Sqrt(2 * 0.01 * 0.01 / 1); math.Abs(es.FinalAcc.Mean-0.81) > 1e-12 || math.Abs(es.FinalAcc.Std-sd) > 1e-12 {
		t.Errorf("esync final %+v, want 0.81 ± %v", es.FinalAcc, sd)
	}
	// each reaches its baseline's tail (0.80) − 0.01 at 10 and 8 s of the baselines' 20 s
	if bt := es.BaselineTail; bt == nil || es.BaselineTailN != 2 || math.Abs(bt.Median-0.45) > 1e-12 || bt.Min != 0.4 || bt.Max != 0.5 {
		t.Errorf("esync ÷ baseline time %+v over %d runs, want median 0.45 in [0.4, 0.5] over 2", bt, es.BaselineTailN)
	}
	md := rep.Markdown()
	for _, want := range []string{"## Across seeds", "| esync-s1, esync-s2 | esync | iid | slowdown 1,1,2,4 | 1,2 |", "2.50× [2.00–3.00] @0.80"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestAccuracyFigurePerHeterogeneity checks that a shard kind whose runs differ in
// heterogeneity gets one accuracy figure per heterogeneity, each with only its runs.
func TestAccuracyFigurePerHeterogeneity(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, f := range fakeRuns()[:2] { // ssgd, esync at 1,1,2,4
		dirs = append(dirs, writeFakeRun(t, root, f))
	}
	sweep := fakeRuns()[1]
	sweep.name, sweep.slowdown = "esync-1-1-10-10", []float64{1, 1, 10, 10}
	dirs = append(dirs, writeFakeRun(t, root, sweep))
	out := filepath.Join(root, "report")
	rep, err := Write(out, dirs, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"accuracy_iid_slowdown-1-1-2-4.png", "accuracy_iid_slowdown-1-1-10-10.png"}
	if len(rep.Figures) < 2 || strings.Join(rep.Figures[:2], " ") != strings.Join(want, " ") {
		t.Fatalf("figures %v, want %v first", rep.Figures, want)
	}
	// the 1,1,10,10 figure has one curve, the 1,1,2,4 figure two: fewer coloured pixels
	counts := make([]int, 2)
	for i, name := range want {
		counts[i] = colouredPixels(readPNG(t, filepath.Join(out, name)))
	}
	if counts[1] >= counts[0] {
		t.Errorf("coloured pixels: %s %d, %s %d; want fewer in the single-run figure", want[0], counts[0], want[1], counts[1])
	}
}

// TestBaselineTailCriterion checks that t@baseline tail−0.01 measures against the baseline's
// tail accuracy, not its last evaluation (here a dip).
func TestBaselineTailCriterion(t *testing.T) {
	run := func(name, strategy string, evals ...[2]float64) fakeRun {
		return fakeRun{name: name, strategy: strategy, shard: "iid", slowdown: []float64{1, 2}, evals: evals,
			compute: []float64{1, 1}, comm: []float64{1, 1}, wait: []float64{0, 0}, elapsed: 10, samples: 100, bytes: 100}
	}
	root := t.TempDir()
	dirs := []string{
		// tail: the evaluations at t ≥ 9, (0.80 + 0.70)/2 = 0.75; the last one is 0.70
		writeFakeRun(t, root, run("ssgd", "ssgd", [2]float64{0, 0.5}, [2]float64{9, 0.80}, [2]float64{10, 0.70})),
		// reaches 0.69 (last − 0.01) at 1 s, 0.74 (tail − 0.01) at 2 s
		writeFakeRun(t, root, run("esync", "esync", [2]float64{1, 0.695}, [2]float64{2, 0.745})),
	}
	rep := buildReport(t, dirs)
	r := rep.Rows[1]
	if r.TimeToBaselineTail == nil || *r.TimeToBaselineTail != 2 || math.Abs(*r.BaselineTailRatio-0.2) > 1e-12 {
		t.Errorf("t@baseline tail−0.01 = %v (ratio %v), want 2 s (0.2 of the baseline's 10 s)", r.TimeToBaselineTail, r.BaselineTailRatio)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"slowdown 1,1,2,4": "slowdown-1-1-2-4",
		"stragglers 1,2 +10ms at 1s,4.5s for 2s (network)": "stragglers-1-2-10ms-at-1s-4.5s-for-2s-network",
		"slowdown 1,2; sleep 0s,5ms":                       "slowdown-1-2-sleep-0s-5ms",
		"  none  ":                                         "none",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
