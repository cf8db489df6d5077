package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
)

// TestTrainAndBenchRunOnInitsComm: real rank processes of `train --collective ring` and
// `bench --collective butterfly` run what was asked on the communicator hetsync.Init formed,
// and on no second one over its endpoint. Each rank's timeline names every collective call
// with its communicator's algorithm and sequence number: the calls of the algorithm asked for
// include Init's join barrier and number one sequence (two communicators of it would each
// count from 1), and no call runs another algorithm
// (bench's results gather, its instrument, runs a ring of its own).
func TestTrainAndBenchRunOnInitsComm(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	run, tl := filepath.Join(dir, "run"), filepath.Join(dir, "train.json")
	if code, out, stderr := runBinary(t, "train", "-np", "2", "--collective", "ring", "--data", data, "--max-rounds", "2",
		"--batch", "16", "--threads", "1", "--out", run, "--timeline", tl); code != 0 {
		t.Fatalf("train: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	var cfg struct {
		Collective string `json:"collective"`
	}
	if b, err := os.ReadFile(filepath.Join(run, "config.json")); err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Collective != "ring" {
		t.Errorf("config.json collective %q (%v), want ring", cfg.Collective, err)
	}
	checkOneComm(t, tl, 2, "ring", "")

	tl = filepath.Join(dir, "bench.json")
	code, out, stderr := runBinary(t, "bench", "-np", "2", "--collective", "butterfly", "-b", "4K", "-e", "8K",
		"-n", "2", "-w", "1", "--settle", "0", "--timeline", tl)
	if code != 0 || !strings.Contains(out, "butterfly") {
		t.Fatalf("bench: exit %d, want a table of butterfly\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	checkOneComm(t, tl, 2, "butterfly", "ring")
}

// checkOneComm reads the timelines of p ranks at path and checks that the collective calls of
// algorithm alg, Init's join barrier among them, number one sequence on each rank (barriers
// take none), and that every other call runs other (the bench's gather; "" for none).
func checkOneComm(t *testing.T, path string, p int, alg, other string) {
	t.Helper()
	for r := range p {
		file := collective.TimelinePath(path, r)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var events []struct {
			Name string `json:"name"`
			Args struct {
				Seq       *uint64 `json:"seq"`
				Algorithm string  `json:"algorithm"`
			} `json:"args"`
		}
		if err := json.Unmarshal(b, &events); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		seqs := map[uint64]string{}
		joined := false
		for _, e := range events {
			if e.Args.Seq == nil || e.Args.Algorithm == "" {
				continue // not a collective call
			}
			call := fmt.Sprintf("%s #%d (%s)", e.Name, *e.Args.Seq, e.Args.Algorithm)
			switch e.Args.Algorithm {
			case alg:
				if e.Name == "barrier" { // a barrier takes no sequence number of its own
					joined = true
					continue
				}
				if prev, dup := seqs[*e.Args.Seq]; dup {
					t.Errorf("rank %d: %s and %s: two communicators of %s", r, prev, call, alg)
				}
				seqs[*e.Args.Seq] = call
			case other:
			default:
				t.Errorf("rank %d: %s: want every call on the job's communicator, of %s", r, call, alg)
			}
		}
		if !joined || len(seqs) == 0 {
			t.Errorf("rank %d: %d calls and no barrier of %s, want Init's join barrier and the calls asked for", r, len(seqs), alg)
		}
	}
}

// An algorithm the job's communicator cannot run is an error naming --collective, the flag
// that gave it, not the hetsync.Init option the command passed it; other errors stay as they
// are.
func TestCollectiveFlagError(t *testing.T) {
	err := hetsync.InitLocal(context.Background(), 2, func(context.Context, *hetsync.Comm) error { return nil },
		hetsync.WithAlgorithm("hier-ring"))
	got := collectiveFlagError(err, "hier-ring")
	if got == nil || !strings.Contains(got.Error(), "--collective hier-ring: ") || strings.Contains(got.Error(), "WithAlgorithm") ||
		!strings.Contains(got.Error(), "link matrix") {
		t.Errorf("error %v, want it to name --collective hier-ring and the missing link matrix, not the option", got)
	}
	other := errors.New("rank 1: joining the job: timed out")
	if got := collectiveFlagError(other, "ring"); got != other {
		t.Errorf("an error of another kind became %v", got)
	}
}
