package command

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/experiment"
	"github.com/hetsync/hetsync/trainer"
)

// writeTinyIDX writes a Fashion-MNIST look-alike to dir: n 28×28 images whose class k
// lights rows 2k..2k+2, so a model learns it in a few steps.
// tinyDataDir writes a tiny Fashion-MNIST-shaped data set (train and t10k IDX files of the
// given sizes) into dir/data and returns that directory.
func tinyDataDir(t *testing.T, dir string, train, test int) string {
	t.Helper()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTinyIDX(t, data, "train", train)
	writeTinyIDX(t, data, "t10k", test)
	return data
}

func writeTinyIDX(t *testing.T, dir, prefix string, n int) {
	t.Helper()
	img := binary.BigEndian.AppendUint32(nil, 0x803)
	img = binary.BigEndian.AppendUint32(img, uint32(n))
	img = binary.BigEndian.AppendUint32(img, 28)
	img = binary.BigEndian.AppendUint32(img, 28)
	lbl := binary.BigEndian.AppendUint32(nil, 0x801)
	lbl = binary.BigEndian.AppendUint32(lbl, uint32(n))
	for i := range n {
		k := (i * 7) % 10
		lbl = append(lbl, byte(k))
		px := make([]byte, 784)
		for r := 2 * k; r < 2*k+3; r++ {
			for c := range 28 {
				px[r*28+c] = byte(200 + (i+c)%50)
			}
		}
		img = append(img, px...)
	}
	for name, body := range map[string][]byte{prefix + "-images-idx3-ubyte": img, prefix + "-labels-idx1-ubyte": lbl} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExperimentEndToEnd runs a two-run experiment (ssgd against asgd, 2 ranks in one
// process) through the built binary and checks the run directories and the report.
func TestExperimentEndToEnd(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 600, 100)
	file := filepath.Join(dir, "tiny.yaml")
	body := "name: tiny\nrun-timeout: 2m\ncommon:\n  np: 2\n  transport: mem\n  data: " + data +
		"\n  max-rounds: 12\n  eval-every: 4\n  batch: 16\n  threads: 1\n  slowdown: [1, 2]\nruns:\n  - name: ssgd\n    sync: ssgd\n  - name: asgd\n    sync: asgd\n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runBinary(t, "experiment", file, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, w := range []string{"[1/2] ssgd: done", "[2/2] asgd: done", "report: " + filepath.Join(out, "report", "report.md")} {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout does not contain %q:\n%s", w, stdout)
		}
	}
	for _, run := range []string{"ssgd", "asgd"} {
		var cfg struct {
			Strategy string    `json:"strategy"`
			Ranks    int       `json:"ranks"`
			Slowdown []float64 `json:"slowdown"`
		}
		b, err := os.ReadFile(filepath.Join(out, run, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil || cfg.Strategy != run || cfg.Ranks != 2 || len(cfg.Slowdown) != 2 {
			t.Errorf("%s/config.json: %+v (%v)", run, cfg, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"| ssgd | ssgd | iid | slowdown 1,2 |", "| asgd | asgd | iid | slowdown 1,2 |", "![accuracy_iid](accuracy_iid.png)"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("report.md does not contain %q:\n%s", w, md)
		}
	}
	f, err := os.Open(filepath.Join(out, "report", "computation_ratio.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("computation_ratio.png: %v", err)
	}

	// report alone over the same runs, with flags after the directories.
	rep := filepath.Join(dir, "rep2")
	code, stdout, stderr = runBinary(t, "report", filepath.Join(out, "ssgd"), filepath.Join(out, "asgd"), "--out", rep, "--baseline=asgd")
	if code != 0 || !strings.Contains(stdout, "time to accuracy of run `asgd`") {
		t.Errorf("report: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestExperimentCommandLine(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("common:\n  np: 2\n  slowdown: [1, 3]\nruns:\n  - name: a\n    sync: esync\n    local-lr: 0.01\n"), 0o644)
	os.WriteFile(bad, []byte("common:\n  np: 2\nruns:\n  - name: a\n    sync: ssgd\n    local_lr: 0.01\n"), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		out  []string
	}{
		{"dry run", []string{"experiment", good, "--dry-run", "--out", "/x"}, 0,
			[]string{"# [1/1] a (timeout 10m0s)\n", " train --np=2 --slowdown=1,3 --sync=esync --local-lr=0.01 --out=/x/a\n", "# then: ", " report /x/a --out=/x/report\n"}},
		{"unknown key", []string{"experiment", bad, "--dry-run"}, 2, []string{bad + ":6", `unknown key "local_lr"`, "did you mean local-lr"}},
		{"no file", []string{"experiment"}, 2, []string{"exactly one experiment file"}},
		{"report bad flag", []string{"report", dir, "--bogus"}, 2, []string{"--bogus"}},
		{"report not a run", []string{"report", dir, "--out", filepath.Join(dir, "r")}, 1, []string{"config.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(t.Context(), append([]string{"hetsync"}, tc.args...), &out, &errb)
			all := out.String() + errb.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, all)
			}
			for _, w := range tc.out {
				if !strings.Contains(all, w) {
					t.Errorf("output does not contain %q:\n%s", w, all)
				}
			}
		})
	}
}

// TestShippedExperimentsParse checks experiments/*.yaml against the flags train has now, and
// each run against its strategy's options, so a renamed flag or an option a run's strategy
// does not take breaks this test rather than `make demo`.
func TestShippedExperimentsParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "experiments", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"demo.yaml": true, "esync.yaml": true, "wbsp.yaml": true, "sync-switch.yaml": true}
	for _, f := range files {
		delete(want, filepath.Base(f))
		spec, err := experiment.Load(f, trainFlagKinds(Options{}))
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if err := checkRunStrategies(f, spec, trainer.Builtin()); err != nil {
			t.Errorf("%v", err)
		}
		for _, r := range spec.Runs {
			if spec.RunTimeout(r) > 5*time.Minute {
				t.Errorf("%s: run %s may take %v; keep experiments short", f, r.Name, spec.RunTimeout(r))
			}
		}
	}
	for f := range want {
		t.Errorf("experiments/%s is missing", f)
	}
}

// Files and standard input a user names are read up to a bound: a device, an endless pipe or
// a config.json linked to /dev/zero is an error naming the file and the limit, not a process
// that runs out of memory.
func TestUnboundedInputsRefused(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(run, "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "metrics.jsonl"), []byte(`{"rank":0,"round":0,"time_s":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		stdin bool // an endless stream of lines
		want  string
	}{
		{[]string{"experiment", "/dev/zero"}, false, "/dev/zero is larger than 1048576 bytes"},
		{[]string{"experiment", "/dev/stdin"}, true, "/dev/stdin is larger than 1048576 bytes"},
		{[]string{"report", "--out", filepath.Join(t.TempDir(), "rep"), run}, false, filepath.Join(run, "config.json") + " is larger than 16777216 bytes"},
	} {
		cmd := exec.Command(hetsyncBinary(t), tc.args...)
		if tc.stdin {
			cmd.Stdin = endless{}
		}
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "goroutine") {
			t.Errorf("%v: exit %d; want an error saying %q:\n%.2000s", tc.args, code, tc.want, out)
		}
	}
}

// endless is standard input that never ends: "a: b" lines without end.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "a: b\n"[i%5]
	}
	return len(p), nil
}
