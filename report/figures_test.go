package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/metrics"
)

// TestFiguresOfSeedsAndLateRanks checks the bar figures of runs repeated over seeds (one bar
// per configuration, its label saying how many seeds, an error bar of their spread) and the
// "made others wait" figure, drawn from the rounds' late_rank and late_wait_s, for rank
// counts 1 to 9 (8 and 9 beyond the palette).
func TestFiguresOfSeedsAndLateRanks(t *testing.T) {
	for _, ranks := range []int{1, 2, 3, 8, 9} { // 8 and 9: more ranks than the palette has colours
		t.Run(fmt.Sprint(ranks), func(t *testing.T) {
			root := t.TempDir()
			late := ranks - 1 // the slow rank
			var dirs []string
			for seed := 1; seed <= 3; seed++ {
				f := fakeRun{name: fmt.Sprintf("esync-s%d", seed), strategy: "esync", shard: "iid", seed: seed,
					evals: [][2]float64{{5, 0.7}, {10, 0.8}}, elapsed: 10, samples: 1000 * seed, bytes: 1000}
				for range ranks {
					f.compute, f.comm, f.wait = append(f.compute, 1), append(f.comm, 1), append(f.wait, 0)
				}
				dir := writeFakeRun(t, root, f)
				// every rank's records name the slow rank late, by 0.25 s a round
				b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				withLate := strings.ReplaceAll(string(b), "}\n", fmt.Sprintf(`,"late_rank":%d,"late_wait_s":0.25}`+"\n", late))
				write(t, filepath.Join(dir, "metrics.jsonl"), withLate)
				dirs = append(dirs, dir)
			}
			out := filepath.Join(root, "report")
			if d := os.Getenv("HETSYNC_REPORT_KEEP"); d != "" {
				out = filepath.Join(d, fmt.Sprint(ranks)) // to look at the figures
			}
			rep, err := Write(out, dirs, "")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(rep.Figures, "made_others_wait.png") {
				t.Fatalf("figures %v lack made_others_wait.png", rep.Figures)
			}
			for _, name := range []string{"throughput.png", "made_others_wait.png"} {
				checkFigure(t, out, name, FigureHeight)
			}
			// The bars are labelled by configuration, the curves by strategy.
			for name, label := range map[string]string{"throughput.svg": "esync-s1 (3 seeds)", "accuracy_iid.svg": "esync (3 seeds)"} {
				svg, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(svg), label) {
					t.Errorf("%s does not draw the three seeds as one %q", name, label)
				}
			}
			runs, err := LoadRuns(dirs)
			if err != nil {
				t.Fatal(err)
			}
			sums, ok := madeOthersWait(runs, ranks)
			if !ok {
				t.Fatal("madeOthersWait found no late rank")
			}
			for _, r := range runs {
				for rank, s := range sums[r.Name] {
					want := 0.0
					if rank == late {
						want = 0.25 * 2 * float64(ranks) // two rounds, every rank's records
					}
					if math.Abs(s-want) > 1e-9 {
						t.Errorf("%s: rank %d made others wait %v s, want %v", r.Name, rank, s, want)
					}
				}
			}
			cs := configurations(rep)
			if len(cs) != 1 || len(cs[0].rows) != 3 {
				t.Errorf("configurations %+v, want one of three runs", cs)
			}
		})
	}
}

// Runs without late ranks recorded draw no "made others wait" figure: an empty figure would
// read as "nobody waited".
func TestNoLateRanksNoFigure(t *testing.T) {
	rep, err := Write(filepath.Join(t.TempDir(), "report"), writeFakeRuns(t)[:2], "")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rep.Figures, "made_others_wait.png") {
		t.Errorf("figures %v: made_others_wait.png without late ranks", rep.Figures)
	}
}

// A timeline keeps its rows readable for a few ranks and its height bounded for many.
func TestTimelineRowHeight(t *testing.T) {
	for _, tc := range []struct{ ranks, row int }{{1, 130}, {9, 130}, {29, 130}, {30, 129}, {64, 60}, {1000, 40}} {
		if got := timelineRowHeight(tc.ranks); got != tc.row {
			t.Errorf("%d ranks: row of %d px, want %d", tc.ranks, got, tc.row)
		}
		if h := timelineExtraPx + tc.ranks*timelineRowHeight(tc.ranks); tc.ranks*timelineMinRowPx < timelineMaxPx && h > timelineMaxPx {
			t.Errorf("%d ranks: %d px high, over %d", tc.ranks, h, timelineMaxPx)
		}
	}
}

// The curve of repeated runs: the k-th point is the mean of the runs' k-th evaluations, with
// the accuracies' standard deviation, as long as two runs have one.
func TestAcrossSeeds(t *testing.T) {
	ev := func(pts ...[2]float64) []metrics.EvalRecord {
		var out []metrics.EvalRecord
		for i, p := range pts {
			out = append(out, metrics.EvalRecord{TimeS: p[0], Round: 10 * i, Accuracy: p[1]})
		}
		return out
	}
	s := acrossSeeds([]Run{
		{Name: "a-s1", Evals: ev([2]float64{1, 0.5}, [2]float64{2, 0.7}, [2]float64{3, 0.8})},
		{Name: "a-s2", Evals: ev([2]float64{3, 0.7}, [2]float64{4, 0.7})},
		{Name: "a-s3", Evals: ev([2]float64{2, 0.6})},
	})
	if s.Name != "a-s1 (3 seeds)" || len(s.X) != 2 {
		t.Fatalf("series %+v, want a-s1 (3 seeds) with two points (the third evaluation is a-s1's alone)", s)
	}
	if s.X[0] != 2 || math.Abs(s.Y[0]-0.6) > 1e-12 || math.Abs(s.Err[0]-0.1) > 1e-12 {
		t.Errorf("first point (%v, %v ± %v), want (2, 0.6 ± 0.1)", s.X[0], s.Y[0], s.Err[0])
	}
	if s.X[1] != 3 || math.Abs(s.Y[1]-0.7) > 1e-12 || s.Err[1] != 0 {
		t.Errorf("second point (%v, %v ± %v), want (3, 0.7 ± 0)", s.X[1], s.Y[1], s.Err[1])
	}
}

// svgTexts are the texts an SVG figure draws.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var texts []string
	dec := xml.NewDecoder(f)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if cd, ok := tok.(xml.CharData); ok {
			if s := strings.TrimSpace(string(cd)); s != "" {
				texts = append(texts, s)
			}
		}
	}
}

// The figures' layout: no bar reaches past the figure's right edge, the legends stand beside
// the plots (outside the bars' and curves' area), the accuracy axis spans the data rather
// than 0–1, and the curves are named by strategy, not by run directory.
func TestFigureLayout(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for i, name := range []string{"ssgd-ring-20250101-120000", "esync-ring-20250101-121000", "wbsp-ring-20250101-122000"} {
		f := fakeRun{name: name, strategy: strings.Split(name, "-")[0], shard: "iid",
			evals: [][2]float64{{2, 0.66 + 0.05*float64(i)}, {4, 0.8}, {6, 0.87 - 0.02*float64(i)}}, elapsed: 6, samples: 1000 * (i + 1), bytes: 1000,
			compute: []float64{1, 2, 3}, comm: []float64{1, 1, 1}, wait: []float64{1, 0.5, 0}}
		dirs = append(dirs, writeFakeRun(t, root, f))
	}
	out := filepath.Join(root, "report")
	if _, err := Write(out, dirs, ""); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"throughput.png", "computation_ratio.png"} {
		img := readPNG(t, filepath.Join(out, name))
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Max.X - 3; x < b.Max.X; x++ {
				if r, g, bl, _ := img.At(x, y).RGBA(); max(r, g, bl)-min(r, g, bl) > 0x2000 {
					t.Fatalf("%s: a bar reaches the figure's right edge (a coloured pixel at %d,%d)", name, x, y)
				}
			}
		}
	}
	// computation_ratio's legend (the ranks) stands right of the plot: no bar is drawn in
	// the column its first entry's swatch takes, the figure's right-most 20 pixels.
	img := readPNG(t, filepath.Join(out, "computation_ratio.png"))
	for y := img.Bounds().Max.Y / 4; y < img.Bounds().Max.Y; y++ {
		for x := FigureWidth - 20; x < FigureWidth; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); max(r, g, bl)-min(r, g, bl) > 0x2000 {
				t.Fatalf("computation_ratio.png: coloured pixel at %d,%d, below the legend in its column", x, y)
			}
		}
	}
	texts := svgTexts(t, filepath.Join(out, "accuracy_iid.svg"))
	all := " " + strings.Join(texts, " ") + " "
	for _, want := range []string{" ssgd ", " esync ", " wbsp ", "0.75", "0.85"} {
		if !strings.Contains(all, want) {
			t.Errorf("accuracy_iid.svg does not draw %q among %q", want, texts)
		}
	}
	for _, unwanted := range []string{"ssgd-ring-", "esync-ring-", " 0.0 ", " 1.0 ", " 0.5 "} {
		if strings.Contains(all, unwanted) {
			t.Errorf("accuracy_iid.svg draws %q (a run's name as a legend, or an axis spanning 0–1) among %q", unwanted, texts)
		}
	}
}
