package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/trainer/metrics"
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
			for _, name := range []string{"throughput.svg", "accuracy_iid.svg"} {
				svg, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(svg), "esync-s1 (3 seeds)") {
					t.Errorf("%s does not draw the three seeds as one \"esync-s1 (3 seeds)\"", name)
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
