package experiment

import (
	"strings"
	"testing"
)

// FuzzParse: no experiment file makes the parser panic; what it accepts has runs with
// distinct names that each name a directory below OUT, and command lines that put each run
// there.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		goodFile,
		"comon:\n  np: 2\nruns:\n  - name: a\n",
		"common:\n  np: four\nruns:\n  - name: a\n",
		"common:\n  np: [1, 2]\nruns:\n  - name: a\n",
		"runs:\n  - name: a/b\n", "runs:\n  - name: ..\n", "runs:\n  - name: a\n  - name: a\n",
		"runs:\n  - name: a\n    sync: ssgd\n    sync: asgd\n",
		"baseline: x\nruns:\n  - name: a\n", "runs: [\n", "", "name: &a x\nruns: *a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse("fuzz.yaml", b, testFlags)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %v does not name the file", err)
			}
			return
		}
		if len(s.Runs) == 0 {
			t.Fatal("accepted a file without runs")
		}
		seen := map[string]bool{}
		for _, r := range s.Runs {
			if !runName.MatchString(r.Name) || reservedRunNames[r.Name] != "" || seen[r.Name] {
				t.Fatalf("accepted run name %q", r.Name)
			}
			seen[r.Name] = true
			args := s.TrainArgs(r, "OUT/"+r.Name)
			if len(args) == 0 || args[len(args)-1] != "--out=OUT/"+r.Name {
				t.Fatalf("run %q: command line %q does not end in its --out", r.Name, args)
			}
		}
	})
}
