package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestRestartsRun(t *testing.T) {
	rankFailure := &RankFailure{Rank: 2, Exit: Exit{Code: 1}}
	usage := errors.New("--np 0: need at least 1 rank")
	for _, tc := range []struct {
		name     string
		max      int
		failures []error // what attempt n returns; nil past the end
		before   error
		attempts int
		want     string // "" for success
	}{
		{"success", 2, nil, nil, 1, ""},
		{"no restarts", 0, []error{rankFailure}, nil, 1, "rank 2 failed first"},
		{"restarted once", 1, []error{rankFailure}, nil, 2, ""},
		{"restarts spent", 2, []error{rankFailure, rankFailure, rankFailure}, nil, 3, "after 2 restart(s), --max-restarts 2"},
		{"wrapped failure", 1, []error{fmt.Errorf("train: %w", rankFailure)}, nil, 2, ""},
		{"not a rank failure", 3, []error{usage}, nil, 1, "need at least 1 rank"},
		{"refused before restarting", 3, []error{rankFailure}, errors.New("no checkpoint"), 1, "no checkpoint"},
		{"negative", -1, nil, nil, 0, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			var seen []int
			p := Restarts{Max: tc.max, Log: &log, Before: func(int, error) error { return tc.before }}
			err := p.Run(context.Background(), func(_ context.Context, n int) error {
				seen = append(seen, n)
				if n < len(tc.failures) {
					return tc.failures[n]
				}
				return nil
			})
			if len(seen) != tc.attempts || !slices.Equal(seen, []int{0, 1, 2, 3}[:tc.attempts]) {
				t.Fatalf("attempts %v, want %d", seen, tc.attempts)
			}
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if restarts := strings.Count(log.String(), "restarting the job"); restarts != max(0, min(tc.attempts-1, tc.max)) {
				t.Fatalf("log %q: %d restarts logged for %d attempts", log.String(), restarts, tc.attempts)
			}
		})
	}
}

func TestRestartsStopWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Restarts{Max: 5}.Run(ctx, func(context.Context, int) error {
		n++
		cancel()
		return &RankFailure{Rank: 0, Exit: Exit{Code: 1}}
	})
	if n != 1 || err == nil {
		t.Fatalf("%d attempts, err %v: a cancelled job must not restart", n, err)
	}
}

func TestWithRestartCount(t *testing.T) {
	got := WithRestartCount([]string{"A=1", EnvRestartCount + "=0", "B=2"}, 3)
	if want := []string{"A=1", "B=2", EnvRestartCount + "=3"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
