package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/launcher"
)

// envRankMain makes the test binary run main's job as one rank, so that the launcher test
// starts ranks of this very program without building it.
const envRankMain = "ESYNC_MODEL_TEST_RANK_ROUNDS"

func TestMain(m *testing.M) {
	if v := os.Getenv(envRankMain); v != "" {
		rounds, err := strconv.Atoi(v)
		if err == nil {
			err = run(context.Background(), 0, rounds, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var (
	crcLine  = regexp.MustCompile(`rank (\d+) of (\d+): parameters crc32 ([0-9a-f]{8})`)
	lossLine = regexp.MustCompile(`held-out loss ([0-9.]+) → ([0-9.]+), accuracy ([0-9.]+) → ([0-9.]+)`)
)

// checkOutput checks that every one of size ranks reported the same parameters and that rank
// 0's held-out loss fell and its accuracy rose above 0.8.
func checkOutput(t *testing.T, out string, size int) {
	t.Helper()
	crcs := map[string]bool{}
	ranks := map[string]bool{}
	for _, m := range crcLine.FindAllStringSubmatch(out, -1) {
		if m[2] != strconv.Itoa(size) {
			t.Errorf("a rank of %s, want %d: %q", m[2], size, m[0])
		}
		ranks[m[1]], crcs[m[3]] = true, true
	}
	if len(ranks) != size || len(crcs) != 1 {
		t.Errorf("%d ranks reported %d distinct parameter checksums, want %d ranks and 1:\n%s", len(ranks), len(crcs), size, out)
	}
	m := lossLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no loss line from rank 0:\n%s", out)
	}
	before, _ := strconv.ParseFloat(m[1], 64)
	after, _ := strconv.ParseFloat(m[2], 64)
	acc, _ := strconv.ParseFloat(m[4], 64)
	if !(after < before) || !(acc > 0.8) {
		t.Errorf("held-out loss %v → %v, accuracy %v: want the loss to fall and the accuracy above 0.8", before, after, acc)
	}
}

func TestInProcessRanks(t *testing.T) {
	for _, np := range []int{1, 2, 3, 5} {
		t.Run(strconv.Itoa(np), func(t *testing.T) {
			var out bytes.Buffer
			if err := run(context.Background(), np, 60, &out); err != nil {
				t.Fatal(err)
			}
			checkOutput(t, out.String(), np)
		})
	}
}

// TestUnderLauncher runs the program as 4 processes of one job, as `hetsync launch -np 4`
// does, over the libp2p transport.
func TestUnderLauncher(t *testing.T) {
	var stdout, stderr syncBuffer
	job := &launcher.Job{
		NP: 4, Command: []string{os.Args[0], "-test.run=^$"}, Env: append(os.Environ(), envRankMain+"=40"),
		Stdout: &stdout, Stderr: &stderr, Timeout: 2 * time.Minute,
	}
	if err := job.Run(context.Background()); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	checkOutput(t, stdout.String(), 4)
}

func TestBadArguments(t *testing.T) {
	for _, tc := range []struct{ np, rounds int }{{-1, 10}, {2, 0}} {
		if err := run(context.Background(), tc.np, tc.rounds, &bytes.Buffer{}); err == nil {
			t.Errorf("-np %d -rounds %d: no error", tc.np, tc.rounds)
		}
	}
}

// syncBuffer is a bytes.Buffer the launcher's output copiers may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
