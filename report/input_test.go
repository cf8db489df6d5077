package report

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hetsync/hetsync/metrics"
)

// A report does not trust the files of a run: records a trainer cannot write are errors that
// name the file and line, found before anything is drawn.
func TestLoadRunRefusesBadRecords(t *testing.T) {
	good := `{"rank":0,"round":0,"time_s":1,"samples":64,"compute_s":0.5,"comm_s":0.1,"wait_s":0.1}`
	tests := []struct {
		name, metrics, evals string
		want                 []string
	}{
		{"negative rank", `{"rank":-1,"round":0,"time_s":1}`, "", []string{"metrics.jsonl:1", "rank -1 < 0"}},
		{"rank beyond the job", good + "\n" + `{"rank":999999,"round":0,"time_s":1}`, "", []string{"metrics.jsonl", "rank 999999", "had 2 ranks"}},
		{"rank 2^40", `{"rank":1099511627776,"round":0,"time_s":1}`, "", []string{"rank 1099511627776", "had 2 ranks"}},
		{"negative compute time", `{"rank":1,"round":3,"time_s":1,"compute_s":-2}`, "", []string{"metrics.jsonl:1", "rank 1 round 3: compute_s = -2"}},
		{"negative wall time", `{"rank":0,"round":0,"time_s":-5}`, "", []string{"metrics.jsonl:1", "time_s = -5"}},
		{"negative samples", `{"rank":0,"round":0,"time_s":1,"samples":-64}`, "", []string{"metrics.jsonl:1", "negative counter"}},
		{"negative round", `{"rank":0,"round":-1,"time_s":1}`, "", []string{"metrics.jsonl:1", "round -1 < 0"}},
		{"a round recorded twice", good + "\n" + strings.Replace(good, `"rank":0`, `"rank":1`, 1) + "\n" + good, "", []string{"metrics.jsonl", "rank 0's round 0 more than once"}},
		{"negative evaluation time", good, `{"time_s":-1,"round":0,"accuracy":0.5}`, []string{"eval.jsonl:1", "time_s = -1"}},
		{"accuracy above 1", good, "{\"time_s\":1,\"round\":0,\"accuracy\":0.5}\n{\"time_s\":2,\"round\":1,\"accuracy\":7}", []string{"eval.jsonl:2", "accuracy = 7"}},
		{"negative accuracy", good, `{"time_s":1,"round":0,"accuracy":-0.1}`, []string{"eval.jsonl:1", "accuracy = -0.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFakeRun(t, t.TempDir(), fakeRun{name: "r", strategy: "ssgd", shard: "iid",
				compute: []float64{1, 1}, comm: []float64{0, 0}, wait: []float64{0, 0}, elapsed: 2})
			write(t, filepath.Join(dir, "metrics.jsonl"), tc.metrics+"\n")
			write(t, filepath.Join(dir, "eval.jsonl"), tc.evals+"\n")
			_, err := LoadRun(dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Without config.json's rank count, the ranks in the records are the job: a rank beyond
// their number is still refused.
func TestLoadRunBoundsRanksWithoutTheirCount(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.json"), `{"strategy":"ssgd"}`)
	write(t, filepath.Join(dir, "metrics.jsonl"), `{"rank":0,"round":0,"time_s":1}`+"\n"+`{"rank":1,"round":0,"time_s":1}`+"\n")
	if _, err := LoadRun(dir); err != nil {
		t.Fatalf("ranks 0 and 1: %v", err)
	}
	write(t, filepath.Join(dir, "metrics.jsonl"), `{"rank":0,"round":0,"time_s":1}`+"\n"+`{"rank":5,"round":0,"time_s":1}`+"\n")
	if _, err := LoadRun(dir); err == nil || !strings.Contains(err.Error(), "rank 5") {
		t.Errorf("ranks 0 and 5 without a rank count: err = %v, want one naming rank 5", err)
	}
}

// report R --out R, or --out any run directory, would replace that run's summary.json.
func TestWriteRefusesARunDirectory(t *testing.T) {
	dirs := writeFakeRuns(t)
	summary := filepath.Join(dirs[1], "summary.json")
	write(t, summary, "the run's own summary\n")
	for _, out := range []string{dirs[1], dirs[1] + "/"} {
		_, err := Write(out, dirs[:2], "")
		if err == nil || !strings.Contains(err.Error(), "--out "+out+" is a run directory") {
			t.Errorf("Write(%s): err = %v, want one saying --out is a run directory", out, err)
		}
	}
	if b, err := os.ReadFile(summary); err != nil || string(b) != "the run's own summary\n" {
		t.Errorf("the run's summary.json after the refused reports: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dirs[1], MarkdownFile)); err == nil {
		t.Errorf("a refused report wrote %s into the run directory", MarkdownFile)
	}
}

// A run that ended early is reported from what it measured, and the report says so: one
// whose summary.json records the early end, and one killed with its launcher (no summary,
// metrics.jsonl empty, the ranks' own files under ranks/).
func TestReportSaysARunEndedEarly(t *testing.T) {
	root := t.TempDir()
	dirs := writeFakeRuns(t)[:1]
	early := writeFakeRun(t, root, fakeRun{name: "interrupted", strategy: "esync", shard: "iid",
		evals: [][2]float64{{2, 0.6}}, compute: []float64{1, 1, 1}, comm: []float64{0, 0, 0}, wait: []float64{0, 0, 0}, elapsed: 3, samples: 300})
	if _, err := metrics.EndEarly(early, "interrupted: interrupt signal received"); err != nil {
		t.Fatal(err)
	}
	killed := writeFakeRun(t, root, fakeRun{name: "killed", strategy: "asgd", shard: "iid",
		compute: []float64{1, 1}, comm: []float64{0, 0}, wait: []float64{0, 0}, elapsed: 3, samples: 300})
	b, err := os.ReadFile(filepath.Join(killed, metrics.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(killed, metrics.RanksDir), 0o755); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(b)), "\n")
	write(t, metrics.RankRecordsPath(killed, 0), lines[0]+lines[1]+"\n")
	write(t, metrics.RankRecordsPath(killed, 1), lines[2]+"{\"rank\":1,\"ro") // torn by the kill
	write(t, filepath.Join(killed, metrics.MetricsFile), "")
	rep, err := Write(filepath.Join(root, "report"), append(dirs, early, killed), "")
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	for _, want := range []string{
		"Run `interrupted` ended early at round 1 (interrupted: interrupt signal received)",
		"Run `killed` ended early at round 1 (" + metrics.NoSummaryReason + ")",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md does not say %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Run `ssgd` ended early") || rep.Rows[0].EndedEarly != nil {
		t.Error("a finished run is reported as ended early")
	}
	if k := rep.Rows[2]; k.EndedEarly == nil || len(k.PerRank) != 2 || k.PerRank[1].Rounds != 1 {
		t.Errorf("killed run: %+v, per rank %+v; want rank 1 with its one whole round", k.EndedEarly, k.PerRank)
	}
}

// A run that recorded no round (an empty metrics.jsonl, no ranks/) is an error, not a row of
// zeros; a run whose job still holds its directory is reported as running, not as stopped.
func TestReportOfNoRoundsAndOfARunningJob(t *testing.T) {
	empty := t.TempDir()
	write(t, filepath.Join(empty, metrics.ConfigFile), `{"strategy":"ssgd","ranks":2}`)
	write(t, filepath.Join(empty, metrics.MetricsFile), "")
	if _, err := LoadRun(empty); err == nil || !strings.Contains(err.Error(), "run "+empty+" recorded no rounds") {
		t.Errorf("LoadRun of a run without rounds: %v; want an error saying it recorded none", err)
	}

	running := writeFakeRun(t, t.TempDir(), fakeRun{name: "running", strategy: "ssgd", shard: "iid",
		compute: []float64{1, 1}, comm: []float64{0, 0}, wait: []float64{0, 0}, elapsed: 3, samples: 300})
	b, err := os.ReadFile(filepath.Join(running, metrics.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(b)), "\n")
	if err := os.MkdirAll(filepath.Join(running, metrics.RanksDir), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, metrics.RankRecordsPath(running, 0), lines[0])
	write(t, filepath.Join(running, metrics.MetricsFile), "")
	if err := os.Remove(filepath.Join(running, metrics.SummaryFile)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	// The job that trains into it: its lock, held as hetsync train holds it.
	lock, err := os.OpenFile(filepath.Join(running, metrics.LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.WriteString("4242\n"); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRun(running)
	if err != nil {
		t.Fatal(err)
	}
	if r.EndedEarly == nil || !r.EndedEarly.InProgress || !strings.Contains(r.EndedEarly.String(), "is still running") ||
		!strings.Contains(r.EndedEarly.String(), "pid 4242") {
		t.Errorf("a run in progress reads as %v; want it still running, naming pid 4242", r.EndedEarly)
	}
	lock.Close() // the job ends without a summary: killed
	if r, err := LoadRun(running); err != nil || r.EndedEarly == nil || r.EndedEarly.InProgress || r.EndedEarly.Reason != metrics.NoSummaryReason {
		t.Errorf("once the job is gone: %v, %v; want %q", r.EndedEarly, err, metrics.NoSummaryReason)
	}
}
