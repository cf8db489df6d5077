package command

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// A bench rank whose data path is a socket (tcp, tls), on a host whose ranks outnumber its
// CPUs, does not poll, unless the user asked for a poll (--poll, or HETSYNC_POLL in the
// environment the launcher passes on); the launcher passes only a user's poll to its ranks, so
// that each rank can tell the two apart. The one-host paths keep bench's poll.
func TestOversubscribedRankDoesNotPoll(t *testing.T) {
	tests := []struct {
		name            string
		args            []string
		env             string // HETSYNC_POLL
		localSize, cpus int
		want, passed    time.Duration // the rank's poll; what the launcher passes on (0: nothing)
	}{
		{"oversubscribed tcp", []string{"--data-path", "tcp"}, "", 128, 2, 0, 0},
		{"oversubscribed tls", []string{"--data-path", "tls"}, "", 3, 2, 0, 0},
		{"oversubscribed shm", []string{"--data-path", "shm"}, "", 128, 2, benchPoll, 0},
		{"oversubscribed auto", nil, "", 128, 2, benchPoll, 0},
		{"one rank a cpu", []string{"--data-path", "tcp"}, "", 2, 2, benchPoll, 0},
		{"flag", []string{"--data-path", "tcp", "--poll", "200us"}, "", 128, 2, 200 * time.Microsecond, 200 * time.Microsecond},
		{"environment", []string{"--data-path", "tcp"}, "1ms", 128, 2, time.Millisecond, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HETSYNC_POLL", tc.env)
			var n netOptions
			app := &cli.App{Flags: netFlags(benchPoll), Action: func(c *cli.Context) error {
				n = netOptionsFrom(c)
				return nil
			}}
			if err := app.Run(append([]string{"bench"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if err := n.validate(); err != nil {
				t.Fatal(err)
			}
			if got := n.onHost(tc.localSize, tc.cpus).Poll; got != tc.want {
				t.Errorf("%d ranks on %d cpus: poll %v, want %v", tc.localSize, tc.cpus, got, tc.want)
			}
			if got := n.settings().Poll; got != tc.passed {
				t.Errorf("the launcher passes poll %v to its ranks, want %v", got, tc.passed)
			}
		})
	}
}
