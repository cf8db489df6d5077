package report

import (
	"strings"
	"testing"

	"github.com/hetsync/hetsync/metrics"
)

// TestLinkBytesTable: two seeds of ESync, each rank sending 100 bytes within its host and 50
// across hosts in each of its 2 rounds, 4 ranks and 500 samples a rank-round (4000 samples):
// 800 and 400 bytes, 0.2 and 0.1 bytes per sample, 100 and 50 per round; the group of seeds
// has the same medians. A run that counted no link bytes (ASGD here) has no row.
func TestLinkBytesTable(t *testing.T) {
	run := func(name, strategy string, seed int, sent metrics.LinkBytes) fakeRun {
		return fakeRun{name: name, strategy: strategy, shard: "iid", seed: seed, slowdown: []float64{1, 1, 2, 4}, target: 0.8,
			evals:   [][2]float64{{5, 0.7}, {10, 0.8}},
			compute: []float64{1, 1, 1, 1}, comm: []float64{1, 1, 1, 1}, wait: []float64{0, 0, 0, 0},
			elapsed: 20, samples: 1000, bytes: 300, sent: sent}
	}
	sent := metrics.LinkBytes{Host: 100, Hosts: 50}
	root := t.TempDir()
	var dirs []string
	for _, f := range []fakeRun{run("esync-s1", "esync", 1, sent), run("esync-s2", "esync", 2, sent), run("asgd-s1", "asgd", 1, metrics.LinkBytes{})} {
		dirs = append(dirs, writeFakeRun(t, root, f))
	}
	rep := buildReport(t, dirs)
	want := LinkTraffic{Bytes: metrics.LinkBytes{Host: 800, Hosts: 400},
		PerSample: LinkRates{Host: 0.2, Hosts: 0.1}, PerRound: LinkRates{Host: 100, Hosts: 50}}
	for _, r := range rep.Rows {
		if r.Strategy == "asgd" {
			if r.Links != nil {
				t.Errorf("%s counted no link bytes but has %+v", r.Name, *r.Links)
			}
			continue
		}
		if r.Links == nil || *r.Links != want {
			t.Errorf("%s: link traffic %+v, want %+v", r.Name, r.Links, want)
		}
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Links == nil || *rep.Groups[0].Links != want.PerSample {
		t.Fatalf("groups %+v: want one of esync with median bytes per sample %+v", rep.Groups, want.PerSample)
	}
	md := rep.Markdown()
	for _, line := range []string{
		"## Bytes on each link class",
		"| esync-s1 | esync | 800 | 400 | 0 | 0.2 | 0.1 | 0.0 | 100 | 50 | 0 |",
		"| esync-s1, esync-s2 | esync | iid | slowdown 1,1,2,4 | 0.2 | 0.1 | 0.0 |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("report.md lacks %q:\n%s", line, md)
		}
	}
	if strings.Contains(md, "| asgd-s1 | asgd | 0 |") {
		t.Errorf("report.md has a link row for a run that counted none:\n%s", md)
	}
}
