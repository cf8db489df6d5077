package launcher

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestElasticNP(t *testing.T) {
	hosts := func(slots ...int) []Host {
		var hs []Host
		for i, s := range slots {
			hs = append(hs, Host{Name: string(rune('a' + i)), Slots: s})
		}
		return hs
	}
	down := []error{&HostError{Host: "c", Err: errors.New("unreachable")}}
	for _, tc := range []struct {
		name          string
		up            []Host
		np, minNP     int
		oversubscribe bool
		want          int
		err           string
	}{
		{"all there", hosts(4, 4), 8, 4, false, 8, ""},
		{"every slot", hosts(2, 3), 0, 1, false, 5, ""},
		{"shrunk", hosts(4), 8, 4, false, 4, ""},
		{"shrunk to an odd size", hosts(3, 2), 9, 5, false, 5, ""},
		{"oversubscribed keeps np", hosts(1), 7, 7, true, 7, ""},
		{"too few", hosts(2), 8, 3, false, 0, "--min-np 3: the reachable hosts hold only 2 rank(s) (dropped: ssh to host c: unreachable)"},
		{"none", nil, 4, 1, true, 0, "hold only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ElasticNP(tc.up, tc.np, tc.minNP, tc.oversubscribe, down)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %d, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestReachableDropsTheHostThatDoesNotAnswer: of a host with an SSH server, one without (a
// loopback address nothing listens on at the port) and this machine, the second is dropped
// with an error naming it.
func TestReachableDropsTheHostThatDoesNotAnswer(t *testing.T) {
	s := startSSHD(t, "")
	hosts := []Host{{Name: "127.0.0.1", Slots: 2}, {Name: "127.0.0.2", Slots: 2}, {Name: LocalHostName, Slots: 1}}
	up, down, err := Reachable(context.Background(), s.config(), hosts)
	if err != nil {
		t.Fatal(err)
	}
	if len(up) != 2 || up[0].Name != "127.0.0.1" || up[1].Name != LocalHostName {
		t.Fatalf("reachable %v, want 127.0.0.1 and %s", up, LocalHostName)
	}
	var he *HostError
	if len(down) != 1 || !errors.As(down[0], &he) || !strings.Contains(down[0].Error(), "127.0.0.2") {
		t.Fatalf("dropped %v, want one error naming 127.0.0.2", down)
	}
}

// TestSSHLaunchShrinksToTheReachableHosts: `hetsync launch -np 4 --min-np 2` over a host that
// answers SSH and one that does not starts 2 ranks on the first, saying so; --min-np 3 refuses.
func TestSSHLaunchShrinksToTheReachableHosts(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1")
	bin := hetsyncBinary(t)
	launch := func(minNP string) (int, string, string) {
		args := append([]string{"launch", "-np", "4", "--min-np", minNP, "-H", "127.0.0.1:2,127.0.0.2:2"}, s.sshArgs()...)
		args = append(args, "--", "sh", "-c", "echo world=$HETSYNC_WORLD_SIZE")
		return runHetsync(t, bin, t.TempDir(), args...)
	}
	code, out, stderr := launch("2")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []string{"[0] world=2\n", "[1] world=2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"dropping a host: ssh to host", "127.0.0.2", "starting 2 rank(s) instead of 4"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	code, out, stderr = launch("3")
	if code == 0 || !strings.Contains(stderr, "--min-np 3: the reachable hosts hold only 2 rank(s)") {
		t.Fatalf("--min-np 3: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}
