package experiment

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLaunch(t *testing.T) {
	tests := []struct {
		name, file, launch string
		want               []string // nil: an error is expected
		wantErr            string
	}{
		{"list, relative to the file", "exp/thin.yaml", "[../scripts/ranks.sh, --hosts, 4]", []string{"scripts/ranks.sh", "--hosts", "4"}, ""},
		{"one word on PATH", "thin.yaml", "ranks-here", []string{"ranks-here"}, ""},
		{"absolute", "exp/thin.yaml", "[/usr/bin/env, A=1]", []string{"/usr/bin/env", "A=1"}, ""},
		{"file in this directory", "thin.yaml", "[./ranks.sh]", []string{"./ranks.sh"}, ""},
		{"empty list", "thin.yaml", "[]", nil, `"launch": the command is empty`},
		{"empty program", "thin.yaml", `[""]`, nil, `"launch": the command is empty`},
		{"empty value", "thin.yaml", "", nil, `"launch" must be a command`},
		{"mapping", "thin.yaml", "{a: 1}", nil, `"launch" must be a command: a list of words, not a mapping`},
		{"nested list", "thin.yaml", "[a, [b]]", nil, `every word of the command must be a single value, not a list`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := "launch: " + tc.launch + "\nruns:\n  - name: a\n    sync: ssgd\n"
			s, err := Parse(tc.file, []byte(body), testFlags)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.file+":1") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s:1 and %q", err, tc.file, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(s.Launch, " ") != strings.Join(tc.want, " ") {
				t.Errorf("Launch = %q, want %q", s.Launch, tc.want)
			}
			got := strings.Join(s.Command("/opt/hetsync", s.Runs[0], "OUT/a"), " ")
			want := strings.Join(tc.want, " ") + " /opt/hetsync train --sync=ssgd --out=OUT/a"
			if got != want {
				t.Errorf("Command:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestRunnerLaunch runs an experiment whose runs start under a launch command: the command
// gets the whole train command line (and the run's own flags), its output goes to the run's
// log, and a run it fails is reported as that run's failure.
func TestRunnerLaunch(t *testing.T) {
	dir := t.TempDir()
	// The stand-in records its arguments, one a line, in the run directory named by --out.
	wrapper := "#!/bin/sh\nfor a; do case $a in --out=*) out=${a#--out=};; esac; done\n" +
		"mkdir -p \"$out\" && printf '%s\\n' \"$@\" > \"$out/args\"\necho launched \"$1\"\nexit 3\n"
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "ranks.sh"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "exp", "thin.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "launch: [../scripts/ranks.sh]\ncommon:\n  np: 8\nruns:\n  - {name: esync, sync: esync}\n  - {name: asgd, sync: asgd, np: 3}\n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(file, testFlags)
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	rn := &Runner{Exe: "/opt/hetsync", Out: filepath.Join(dir, "out"), Progress: &progress, StopGrace: time.Second}
	_, err = rn.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "2 of 2 runs failed: esync, asgd") {
		t.Errorf("err = %v, want both runs failed", err)
	}
	for _, tc := range []struct{ run, np string }{{"esync", "8"}, {"asgd", "3"}} {
		args, err := os.ReadFile(filepath.Join(rn.Out, tc.run, "args"))
		if err != nil {
			t.Fatalf("run %s: the launch command did not run: %v\n%s", tc.run, err, progress.String())
		}
		want := "/opt/hetsync\ntrain\n--np=" + tc.np + "\n--sync=" + tc.run + "\n--out=" + filepath.Join(rn.Out, tc.run) + "\n"
		if string(args) != want {
			t.Errorf("run %s: the launch command got\n%s\nwant\n%s", tc.run, args, want)
		}
		log, _ := os.ReadFile(filepath.Join(rn.Out, "logs", tc.run+".log"))
		wantLog := "$ " + filepath.Join(dir, "scripts", "ranks.sh") + " /opt/hetsync train --np=" + tc.np
		if !strings.HasPrefix(string(log), wantLog) || !strings.Contains(string(log), "launched /opt/hetsync") {
			t.Errorf("run %s: log\n%s\nwant it to start with %q and hold the command's output", tc.run, log, wantLog)
		}
	}
	if !strings.Contains(progress.String(), "exit status 3") {
		t.Errorf("progress does not name the launch command's status:\n%s", progress.String())
	}
}
