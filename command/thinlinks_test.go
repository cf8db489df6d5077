package command

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/experiment"
	"github.com/hetsync/hetsync/internal/netns"
	"github.com/hetsync/hetsync/trainer"
)

// thinLinks starts scripts/thin-links.sh on the short experiment file: 2 namespace hosts
// joined by 20 Mbit/s links, the ranks reading a tiny data set. The caller waits for it.
func thinLinks(t *testing.T, ctx context.Context, out string, stderr *bytes.Buffer) *exec.Cmd {
	t.Helper()
	data := tinyDataDir(t, t.TempDir(), 600, 100)
	cmd := exec.CommandContext(ctx, "../scripts/thin-links.sh", "experiments/thin-links-short.yaml", "--out", out)
	cmd.Env = append(os.Environ(), "HETSYNC_BIN="+hetsyncBinary(t), "HETSYNC_DATA="+data,
		"TOPO=uniform", "HOSTS=2", "RATE=20", "PLACEMENT=block")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// namespacesOf returns the namespaces left of the network the script named in its output.
func namespacesOf(t *testing.T, output string) []string {
	t.Helper()
	m := regexp.MustCompile(`namespaces (hstl[0-9]+)-\*`).FindStringSubmatch(output)
	if m == nil {
		t.Fatalf("the script did not name its namespaces:\n%s", output)
	}
	list, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range strings.Split(string(list), "\n") {
		if strings.HasPrefix(l, m[1]+"-") {
			left = append(left, strings.Fields(l)[0])
		}
	}
	return left
}

// TestThinLinks is the short version of the thin-link experiment: ESync and ASGD, a few rounds
// each, with their ranks on namespace hosts behind shaped links. Both runs finish, each run
// directory records what ran (strategy, the collective asked for and the one the rounds ran
// over, data path, the shaped network and the link matrix the ranks planned from) and the
// traffic, and the network is gone afterwards, also
// when the script is stopped part-way.
func TestThinLinks(t *testing.T) {
	netns.RequireAvailable(t)
	tests := []struct {
		name string
		stop bool // SIGTERM the script once the first run has started
	}{
		{"both runs", false},
		{"stopped", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out := filepath.Join(t.TempDir(), "tl")
			var output bytes.Buffer
			cmd := thinLinks(t, ctx, out, &output)
			if tc.stop {
				stopWhenStarted(t, cmd, filepath.Join(out, "thin-links-short", "logs", "esync-auto.log"))
			}
			err := cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("thin-links.sh did not finish: %v\n%s", err, output.String())
			}
			if left := namespacesOf(t, output.String()); len(left) > 0 {
				t.Errorf("namespaces left behind: %v", left)
			}
			if tc.stop {
				if err == nil {
					t.Errorf("stopped part-way, the script exited 0:\n%s", output.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("thin-links.sh: %v\n%s", err, output.String())
			}
			exp := filepath.Join(out, "thin-links-short")
			for _, w := range []string{"[1/2] esync-auto: done", "[2/2] asgd: done", filepath.Join(exp, "report", "report.md")} {
				if !strings.Contains(output.String(), w) {
					t.Errorf("output does not contain %q:\n%s", w, output.String())
				}
			}
			for _, run := range []struct{ name, sync, collective string }{{"esync-auto", "esync", "auto"}, {"asgd", "asgd", "ps"}} {
				checkThinRun(t, filepath.Join(exp, run.name), run.sync, run.collective)
			}
		})
	}
}

// stopWhenStarted sends SIGTERM to the script once log exists (a run has started).
func stopWhenStarted(t *testing.T, cmd *exec.Cmd, log string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(log); err == nil {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no run started: %s never appeared", log)
}

// checkThinRun checks one run directory of the short experiment.
func checkThinRun(t *testing.T, dir, sync, collective string) {
	t.Helper()
	var cfg struct {
		Strategy   string `json:"strategy"`
		Collective string `json:"collective"`
		Ranks      int    `json:"ranks"`
		Transport  string `json:"transport"`
		DataPath   string `json:"data_path"`
	}
	var sum struct {
		Collective string  `json:"collective"`
		DataPath   string  `json:"data_path"`
		Rounds     int     `json:"rounds"`
		BytesSent  int64   `json:"bytes_sent"`
		Samples    int64   `json:"samples"`
		Traffic    float64 `json:"traffic_mb_per_s"`
		PerRank    []struct {
			Rank      int   `json:"rank"`
			BytesSent int64 `json:"bytes_sent"`
			BytesRecv int64 `json:"bytes_recv"`
		} `json:"per_rank"`
	}
	var network struct {
		Network string `json:"network"`
		Hosts   int    `json:"hosts"`
		HostOf  []int  `json:"host_of_rank"`
		Links   string `json:"links"`
	}
	var links struct {
		P     int `json:"p"`
		Links [][]struct {
			Beta float64 `json:"beta_s_per_b"`
		} `json:"links"`
	}
	for file, v := range map[string]any{"config.json": &cfg, "summary.json": &sum, "network.json": &network, "links.json": &links} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatalf("run %s: %v", dir, err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s/%s: %v", dir, file, err)
		}
	}
	if cfg.Strategy != sync || cfg.Collective != collective || cfg.Ranks != 4 || cfg.Transport != "p2p" || cfg.DataPath != "tcp" {
		t.Errorf("%s: config records %+v, want %s over %s, 4 ranks, p2p over tcp", dir, cfg, sync, collective)
	}
	// What the rounds ran over: auto's choice (planned from links.json), or the server.
	wantRan := trainer.ParameterServer
	if collective == "auto" {
		wantRan = sum.Collective
		if wantRan == "" || wantRan == "auto" {
			t.Errorf("%s: summary.json records the collective %q, not what auto chose", dir, wantRan)
		}
	}
	if sum.Collective != wantRan || sum.DataPath != "p2p data-path=tcp" {
		t.Errorf("%s: summary.json: rounds ran over %q by %q, want %q by p2p data-path=tcp", dir, sum.Collective, sum.DataPath, wantRan)
	}
	if sum.Rounds < 1 || sum.Samples < 1 || sum.BytesSent <= 0 || sum.Traffic <= 0 || len(sum.PerRank) != 4 {
		t.Errorf("%s: summary %+v: want rounds, samples, traffic and 4 ranks", dir, sum)
	}
	for _, r := range sum.PerRank {
		if r.BytesSent <= 0 || r.BytesRecv <= 0 {
			t.Errorf("%s: rank %d sent %d and received %d bytes", dir, r.Rank, r.BytesSent, r.BytesRecv)
		}
	}
	if !strings.Contains(network.Network, "20 Mbit/s") || network.Hosts != 2 || len(network.HostOf) != 4 ||
		network.HostOf[0] != 0 || network.HostOf[3] != 1 || network.Links != filepath.Join(dir, "links.json") {
		t.Errorf("%s: network.json records %+v, want 2 hosts at 20 Mbit/s, ranks 0,0,1,1 and this run's links.json", dir, network)
	}
	// Ranks 0 and 2 are on different hosts: their link is the shaped one, 20 Mbit/s.
	if links.P != 4 || len(links.Links) != 4 || len(links.Links[0]) != 4 {
		t.Fatalf("%s: links.json is not a 4-rank matrix: %+v", dir, links)
	}
	if beta := links.Links[0][2].Beta; beta < 0.99*8/20e6 || beta > 1.01*8/20e6 {
		t.Errorf("%s: links.json: rank 0 to 2 at %g s/B, want 20 Mbit/s (%g)", dir, beta, 8/20e6)
	}
}

// TestThinLinkFilesLaunch: every thin-link experiment file starts its runs through an
// executable launch command that exists, so a moved script breaks this test, not the
// experiment part-way.
func TestThinLinkFilesLaunch(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "experiments", "thin-links*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("thin-link experiment files: %v, %v", files, err)
	}
	for _, f := range files {
		spec, err := experiment.Load(f, trainFlagKinds(Options{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(spec.Launch) == 0 {
			t.Errorf("%s: no launch command", f)
			continue
		}
		if st, err := os.Stat(spec.Launch[0]); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: launch command %s is not an executable file (%v)", f, spec.Launch[0], err)
		}
	}
}
