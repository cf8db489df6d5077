package experiment

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testFlags stands for the flags of `hetsync train`.
var testFlags = map[string]FlagKind{
	"np": KindInt, "sync": KindString, "transport": KindString, "model": KindString, "seed": KindUint,
	"slowdown": KindString, "target-acc": KindFloat, "max-time": KindDuration, "max-rounds": KindInt,
	"eval-every": KindString, "stragglers": KindString, "local-lr": KindFloat, "oversubscribe": KindBool,
	"timeout": KindDuration, "out": KindString,
}

const goodFile = `name: demo
description: esync against ssgd
run-timeout: 3m
baseline: ssgd
common:
  np: 4
  transport: mem
  slowdown: [1, 1, 2, 4]
  target-acc: 0.80
  max-time: 90s
  sync: ssgd
runs:
  - name: ssgd
  - name: esync
    sync: esync
    local-lr: 0.05
    run-timeout: 1m
  - name: straggle
    sync: ssgd
    stragglers: "ranks=1,2;delay=30ms;at=20s,60s;for=10s"
    timeout: 5m
    oversubscribe: true
`

func TestParseGood(t *testing.T) {
	for _, flags := range []map[string]FlagKind{testFlags, nil} {
		s, err := Parse("demo.yaml", []byte(goodFile), flags)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != "demo" || s.Baseline != "ssgd" || s.Timeout != 3*time.Minute || len(s.Runs) != 3 {
			t.Fatalf("spec %+v", s)
		}
		tests := []struct {
			run     int
			args    string
			timeout time.Duration
		}{
			{0, "train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=ssgd --out=OUT/ssgd", 3 * time.Minute},
			{1, "train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=esync --local-lr=0.05 --out=OUT/esync", time.Minute},
			{2, "train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=ssgd " +
				"--stragglers=ranks=1,2;delay=30ms;at=20s,60s;for=10s --timeout=5m --oversubscribe=true --out=OUT/straggle", 3 * time.Minute},
		}
		for _, tc := range tests {
			r := s.Runs[tc.run]
			if got := strings.Join(s.TrainArgs(r, "OUT/"+r.Name), " "); got != tc.args {
				t.Errorf("run %s:\n got %s\nwant %s", r.Name, got, tc.args)
			}
			if got := s.RunTimeout(r); got != tc.timeout {
				t.Errorf("run %s: timeout %v, want %v", r.Name, got, tc.timeout)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // all must appear in the error
	}{
		{"unknown top key", "comon:\n  np: 2\nruns:\n  - name: a\n", []string{"bad.yaml:1", `unknown key "comon"`, "common"}},
		{"unknown flag", "common:\n  np: 2\nruns:\n  - name: a\n    sync: ssgd\n    stalenes: 3\n", []string{"bad.yaml:6", `run "a"`, `unknown key "stalenes"`, "not a flag of hetsync train"}},
		{"typo suggestion", "common:\n  max-round: 2\nruns:\n  - name: a\n", []string{"bad.yaml:2", `"max-round"`, "did you mean max-rounds"}},
		{"bad int", "common:\n  np: four\nruns:\n  - name: a\n", []string{"bad.yaml:2", `key "np" must be an integer, got "four"`}},
		{"bad float", "runs:\n  - name: a\n    target-acc: high\n", []string{"bad.yaml:3", `"target-acc" must be a number`}},
		{"bad duration", "runs:\n  - name: a\n    max-time: 90\n", []string{"bad.yaml:3", `"max-time" must be a duration`}},
		{"bad bool", "runs:\n  - name: a\n    oversubscribe: maybe\n", []string{"bad.yaml:3", `"oversubscribe" must be true or false`}},
		{"negative uint", "common:\n  seed: -1\nruns:\n  - name: a\n", []string{"bad.yaml:2", `"seed" must be a non-negative integer`}},
		{"mapping value", "common:\n  np:\n    a: 1\nruns:\n  - name: a\n", []string{"bad.yaml:3", `"np" must be an integer, not a mapping`}},
		{"list for int", "common:\n  np: [1, 2]\nruns:\n  - name: a\n", []string{"bad.yaml:2", `"np" must be an integer, not a list`}},
		{"empty value", "common:\n  sync:\nruns:\n  - name: a\n", []string{"bad.yaml:2", `"sync" must be a string, not empty`}},
		{"common not a mapping", "common: [np]\nruns:\n  - name: a\n", []string{"bad.yaml:1", "common must be a mapping"}},
		{"resume reserved", "runs:\n  - name: a\n    resume: runs/x\n", []string{"bad.yaml:3", `"resume" cannot be set here`, "hetsync train --resume"}},
		{"run name too long", "runs:\n  - name: " + strings.Repeat("n", 300) + "\n", []string{"bad.yaml:2", "run name of 300 characters: at most 128"}},
		{"out reserved", "common:\n  out: x\nruns:\n  - name: a\n", []string{"bad.yaml:2", `"out" cannot be set here`}},
		{"no runs", "common:\n  np: 2\n", []string{"bad.yaml", "no runs"}},
		{"runs not a list", "runs:\n  name: a\n", []string{"bad.yaml:2", "runs must be a list"}},
		{"run without name", "runs:\n  - sync: ssgd\n", []string{"bad.yaml:2", "run has no name"}},
		{"bad run name", "runs:\n  - name: a/b\n", []string{"bad.yaml:2", `run name "a/b"`}},
		{"run name ..", "runs:\n  - name: ok\n  - name: ..\n", []string{"bad.yaml:3", `run name ".." is reserved`, "above OUT"}},
		{"run name .", "runs:\n  - name: .\n", []string{"bad.yaml:2", `run name "." is reserved`}},
		{"run name report", "runs:\n  - name: report\n", []string{"bad.yaml:2", `run name "report" is reserved`, "report"}},
		{"run name logs", "runs:\n  - name: logs\n", []string{"bad.yaml:2", `run name "logs" is reserved`, "output"}},
		{"duplicate run", "runs:\n  - name: a\n  - name: a\n", []string{"bad.yaml:3", `"a" is used twice (first on line 2)`}},
		{"duplicate key", "runs:\n  - name: a\n    sync: ssgd\n    sync: asgd\n", []string{"bad.yaml:4", `"sync" given twice`}},
		{"bad run timeout", "run-timeout: soon\nruns:\n  - name: a\n", []string{"bad.yaml:1", `"run-timeout" must be a positive duration`}},
		{"unknown baseline", "baseline: x\nruns:\n  - name: a\n", []string{"bad.yaml", `baseline "x" is not the name of a run`}},
		{"not yaml", "runs: [\n", []string{"bad.yaml", "yaml"}},
		{"empty file", "", []string{"bad.yaml is empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.body), testFlags)
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exp.yaml")
	if err := os.WriteFile(path, []byte("runs:\n  - name: a\n    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, testFlags)
	if err == nil || !strings.Contains(err.Error(), path+":3") || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("err = %v, want one naming %s:3 and the key", err, path)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml"), nil); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestDryRun(t *testing.T) {
	s, err := Parse("demo.yaml", []byte(goodFile), testFlags)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rn := &Runner{Exe: "/opt/hetsync", Out: "/tmp/exp out", Progress: &out, DryRun: true}
	if _, err := rn.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	want := `# [1/3] ssgd (timeout 3m0s)
/opt/hetsync train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=ssgd '--out=/tmp/exp out/ssgd'
# [2/3] esync (timeout 1m0s)
/opt/hetsync train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=esync --local-lr=0.05 '--out=/tmp/exp out/esync'
# [3/3] straggle (timeout 3m0s)
/opt/hetsync train --np=4 --transport=mem --slowdown=1,1,2,4 --target-acc=0.80 --max-time=90s --sync=ssgd '--stragglers=ranks=1,2;delay=30ms;at=20s,60s;for=10s' --timeout=5m --oversubscribe=true '--out=/tmp/exp out/straggle'
# then: /opt/hetsync report '/tmp/exp out/ssgd' '/tmp/exp out/esync' '/tmp/exp out/straggle' '--out=/tmp/exp out/report' --baseline=ssgd
`
	if out.String() != want {
		t.Errorf("dry run:\n%s\nwant:\n%s", out.String(), want)
	}
	if _, err := os.Stat("/tmp/exp out"); err == nil {
		t.Errorf("a dry run created its output directory")
	}
}

// TestRunnerFailures runs stand-ins for hetsync: one that fails and one that outlives its
// timeout. Both are reported, the experiment goes on to the end and fails.
func TestRunnerFailures(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Only the hanging run has a short timeout: on a loaded machine the others may take
	// longer than a second to fail, and must still fail for their own reason.
	tests := []struct {
		name, exe, timeout string
		want               []string
	}{
		{"exit 3", script("fail.sh", `echo "hetsync: rank 1: boom" >&2; exit 3`), "10m", []string{"exit status 3", "rank 1: boom"}},
		{"exit 0 without a run", script("noop.sh", "exit 0"), "10m", []string{"wrote no summary.json"}},
		{"timeout", script("hang.sh", "exec sleep 60"), "1s", []string{"timed out after 1s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte("run-timeout: "+tc.timeout+"\nruns:\n  - name: a\n  - name: b\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			rn := &Runner{Exe: tc.exe, Out: filepath.Join(t.TempDir(), "exp"), Progress: &out, StopGrace: time.Second}
			res, err := rn.Run(context.Background(), s)
			if err == nil || !strings.Contains(err.Error(), "2 of 2 runs failed: a, b") {
				t.Errorf("err = %v, want both runs named", err)
			}
			if len(res.Runs) != 2 || res.ReportDir != "" {
				t.Errorf("result %+v", res)
			}
			for _, w := range append(tc.want, "[1/2] a: FAILED", "[2/2] b: FAILED") {
				if !strings.Contains(out.String(), w) {
					t.Errorf("progress does not contain %q:\n%s", w, out.String())
				}
			}
			log, _ := os.ReadFile(filepath.Join(rn.Out, "logs", "b.log"))
			if !strings.HasPrefix(string(log), "$ "+tc.exe+" train --out=") {
				t.Errorf("log b.log does not start with the command:\n%s", log)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"a", "--x=1,2"}, "a --x=1,2"},
		{[]string{"it's", ""}, `'it'\''s' ''`},
		{[]string{"a;b", "c d"}, "'a;b' 'c d'"},
	}
	for _, tc := range tests {
		if got := ShellQuote(tc.in); got != tc.want {
			t.Errorf("ShellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// An experiment interrupted before its runs start says so; a run it never started is not a
// failed one.
func TestRunnerInterrupted(t *testing.T) {
	s, err := Parse("x.yaml", []byte("runs:\n  - name: a\n  - name: b\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	rn := &Runner{Exe: "/nonexistent/hetsync", Out: filepath.Join(t.TempDir(), "exp"), Progress: &out}
	res, err := rn.Run(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "interrupted before 2 of 2 runs started: a, b") || strings.Contains(err.Error(), "failed") ||
		len(res.Runs) != 2 || len(res.Failed()) != 0 {
		t.Errorf("err = %v, result %+v", err, res)
	}
	if !strings.Contains(out.String(), "[2/2] b: not started: context canceled") {
		t.Errorf("progress:\n%s", out.String())
	}
}

func TestRunnerRefusesFinishedRuns(t *testing.T) {
	s, err := Parse("x.yaml", []byte("runs:\n  - name: a\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "a", "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	rn := &Runner{Exe: "/nonexistent/hetsync", Out: out}
	if _, err := rn.Run(context.Background(), s); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("err = %v, want a refusal", err)
	}
}
