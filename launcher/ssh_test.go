package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// sshJob is a job over s on two "hosts" (two loopback addresses of one sshd), 2 ranks each.
func sshJob(t *testing.T, s *testSSHD, cfg SSHConfig, script string) (*Job, *SSHSpawner, *syncBuffer, *syncBuffer) {
	t.Helper()
	hosts, err := ParseHostList(s.Addrs[0] + ":2," + s.Addrs[len(s.Addrs)-1] + ":2")
	if err != nil {
		t.Fatal(err)
	}
	place, err := Place(hosts, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := NewSSHSpawner(cfg, hosts, place)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	stdout, stderr := newSyncBuffer("ready", 4), &syncBuffer{}
	job := &Job{
		NP: 4, Command: []string{"sh", "-c", script}, Env: os.Environ(), Stdout: stdout, Stderr: stderr, Log: stderr,
		Grace: time.Second, Spawner: sp, Hosts: hosts, Placement: place, Rendezvous: "127.0.0.1:1",
	}
	return job, sp, stdout, stderr
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSSHJobEnvironmentOutputAndFiles(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	cfg := s.config()
	cfg.Forward = []string{"FWD_ME"}
	t.Setenv("FWD_ME", "it's forwarded")
	t.Setenv("NOT_FORWARDED", "local only")
	script := `echo "rank=$HETSYNC_RANK size=$HETSYNC_WORLD_SIZE local=$HETSYNC_LOCAL_RANK/$HETSYNC_LOCAL_SIZE host=$HETSYNC_HOSTNAME ` +
		`torch=$RANK/$WORLD_SIZE/$LOCAL_RANK fwd=$FWD_ME nf=${NOT_FORWARDED:-unset} secret=${#HETSYNC_JOB_SECRET} rdv=$HETSYNC_RENDEZVOUS ` +
		`master=$MASTER_ADDR:$MASTER_PORT settings=$HETSYNC_SECURITY/$HETSYNC_DATA_PATH/$HETSYNC_JOIN_TIMEOUT"; ` +
		`echo "to stderr $HETSYNC_RANK" >&2; ps -o args= -p $$ | grep -c "$HETSYNC_JOB_SECRET" || true`
	job, _, stdout, stderr := sshJob(t, s, cfg, script)
	job.Settings = Settings{Security: "none", DataPath: "tcp", JoinTimeout: 90 * time.Second}
	job.OutputDir = filepath.Join(t.TempDir(), "out")
	job.Timestamps = true
	if err := job.Run(testContext(t)); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* `
	for r := 0; r < 4; r++ {
		host := s.Addrs[r/2]
		want := fmt.Sprintf(`(?m)^%s\[%d\] rank=%d size=4 local=%d/2 host=%s torch=%d/4/%d fwd=it's forwarded nf=unset secret=64 rdv=127.0.0.1:1 `+
			`master=127.0.0.1:1 settings=none/tcp/1m30s$`,
			ts, r, r, r%2, regexp.QuoteMeta(host), r, r%2)
		if !regexp.MustCompile(want).MatchString(stdout.String()) {
			t.Errorf("rank %d: no line matching %s in\n%s", r, want, stdout)
		}
		// The secret travels over stdin: it is not in the supervisor's command line.
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^%s\[%d\] 0$`, ts, r)).MatchString(stdout.String()) {
			t.Errorf("rank %d: the job secret shows in the remote process list:\n%s", r, stdout)
		}
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^%s\[%d\] to stderr %d$`, ts, r, r)).MatchString(stderr.String()) {
			t.Errorf("rank %d: stderr line missing:\n%s", r, stderr)
		}
		b, err := os.ReadFile(filepath.Join(job.OutputDir, fmt.Sprintf("rank.%d.log", r)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, fmt.Sprintf("rank=%d ", r)) }) ||
			!slices.Contains(lines, fmt.Sprintf("to stderr %d", r)) {
			t.Errorf("rank.%d.log:\n%s", r, b)
		}
	}
}

func TestSSHFirstFailureStopsEveryHost(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	tests := []struct {
		name   string
		script string
		want   Exit
	}{
		{"exit status", `if [ "$HETSYNC_RANK" = 3 ]; then echo ready; exit 3; fi; echo ready; exec sleep ` + marker, Exit{Code: 3}},
		{"killed by a signal", `if [ "$HETSYNC_RANK" = 3 ]; then echo ready; kill -KILL $$; fi; echo ready; exec sleep ` + marker, Exit{Code: -1, Signal: syscall.SIGKILL}},
		{"command not found", `if [ "$HETSYNC_RANK" = 3 ]; then echo ready; exec /nonexistent/hetsync-test; fi; echo ready; exec sleep ` + marker, Exit{Code: 127}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job, _, stdout, stderr := sshJob(t, s, s.config(), tc.script)
			err := job.Run(testContext(t))
			var f *RankFailure
			if !errors.As(err, &f) {
				t.Fatalf("got %v, want a RankFailure\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
			}
			if f.Rank != 3 || f.Host != "127.0.0.2" || withoutTime(f.Exit) != tc.want {
				t.Errorf("got %+v, want rank 3 on 127.0.0.2 with %v", f, tc.want)
			}
			if !strings.Contains(err.Error(), "rank 3 on host 127.0.0.2 failed first") {
				t.Errorf("error %q does not name the rank and host", err)
			}
			waitNoProcesses(t, "sleep "+marker)
		})
	}
}

// readPIDs reads "[r] pid N" lines until it has n of them.
func readPIDs(t *testing.T, r *bufio.Scanner, n int) map[int]int {
	t.Helper()
	pids := map[int]int{}
	re := regexp.MustCompile(`^\[(\d+)\] pid (\d+)$`)
	for len(pids) < n && r.Scan() {
		if m := re.FindStringSubmatch(r.Text()); m != nil {
			rank, _ := strconv.Atoi(m[1])
			pid, _ := strconv.Atoi(m[2])
			pids[rank] = pid
		}
	}
	if len(pids) < n {
		t.Fatalf("got the pids of %d ranks, want %d", len(pids), n)
	}
	return pids
}

// pipeWriter feeds a job's stdout to a scanner while keeping a copy.
type pipeWriter struct {
	w *os.File
	b syncBuffer
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	p.b.Write(b)
	return p.w.Write(b)
}

func TestSSHRankKilledOnTheRemoteSideStopsTheJob(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	// Each rank starts a child in its group too: it must go as well.
	job, _, _, stderr := sshJob(t, s, s.config(), `sleep `+marker+` & echo "pid $$"; exec sleep `+marker)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	out := &pipeWriter{w: pw}
	job.Stdout = out
	res := make(chan error, 1)
	go func() { res <- job.Run(testContext(t)); pw.Close() }()
	pids := readPIDs(t, bufio.NewScanner(pr), 4)
	if err := syscall.Kill(pids[2], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(pr).WriteTo(discard{}) }()
	err = <-res
	var f *RankFailure
	if !errors.As(err, &f) || f.Rank != 2 || f.Exit.Signal != syscall.SIGKILL || f.Host != "127.0.0.2" {
		t.Fatalf("got %v, want rank 2 on 127.0.0.2 killed by SIGKILL\nstderr:\n%s", err, stderr)
	}
	if ExitCode(err) != 128+9 {
		t.Errorf("exit code %d, want 137", ExitCode(err))
	}
	waitNoProcesses(t, "sleep "+marker)
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func TestSSHInterruptAndLostLauncherKillRemoteRanks(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	for _, how := range []string{"cancel", "connection lost"} {
		t.Run(how, func(t *testing.T) {
			marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
			// The rank ignores SIGTERM: "cancel" must escalate to SIGKILL after the grace.
			job, sp, stdout, stderr := sshJob(t, s, s.config(), `trap "" TERM; sleep `+marker+` & echo ready; wait`)
			job.Grace = 300 * time.Millisecond
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- job.Run(ctx) }()
			<-stdout.ready
			// "ready" comes before the background sleep may have started: wait for all four
			// (bounded only against a rank that never starts; SSH sessions on a loaded machine
			// take seconds).
			for deadline := time.Now().Add(2 * time.Minute); len(processesMatching("sleep "+marker, true)) < 4; time.Sleep(25 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("want 4 sleeping ranks, have %d", len(processesMatching("sleep "+marker, true)))
				}
			}
			if how == "cancel" {
				cancel()
			} else {
				sp.Close() // as if the launcher died: the remote supervisors see end of file
			}
			err := <-res
			if how == "cancel" && !errors.As(err, new(*Interrupted)) {
				t.Errorf("got %v, want Interrupted", err)
			}
			if how != "cancel" && err == nil {
				t.Errorf("job survived losing its connections")
			}
			waitNoProcesses(t, "sleep "+marker)
			if t.Failed() {
				t.Logf("stderr:\n%s", stderr)
			}
		})
	}
}

func TestSSHTimeoutNamesTheRunningRanks(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	job, sp, _, stderr := sshJob(t, s, s.config(), `echo ready; if [ "$HETSYNC_RANK" != 0 ]; then exec sleep `+marker+`; fi`)
	// The timeout starts once every rank is started, and the last one starts only after rank 0
	// has exited, however long that takes on a loaded machine: the 3 ranks named are exact.
	job.Spawner = &lastAfterRank0Exits{Spawner: sp, last: job.NP - 1, exited: make(chan struct{})}
	job.Timeout = 2 * time.Second
	err := job.Run(testContext(t))
	var to *TimedOut
	if !errors.As(err, &to) {
		t.Fatalf("got %v, want TimedOut\n%s", err, stderr)
	}
	want := "job ran longer than --timeout 2s; 3 rank(s) still running: 1 (127.0.0.1), 2 (127.0.0.2), 3 (127.0.0.2)"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	if ExitCode(err) != 124 {
		t.Errorf("exit code %d, want 124", ExitCode(err))
	}
	waitNoProcesses(t, "sleep "+marker)
}

// lastAfterRank0Exits is a Spawner that starts rank last only after rank 0's process has
// exited (its Wait has returned).
type lastAfterRank0Exits struct {
	Spawner
	last   int
	exited chan struct{}
}

func (s *lastAfterRank0Exits) Spawn(ctx context.Context, spec ProcSpec) (Process, error) {
	if spec.Rank == s.last {
		select {
		case <-s.exited:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p, err := s.Spawner.Spawn(ctx, spec)
	if err != nil || spec.Rank != 0 {
		return p, err
	}
	return &closeOnExit{Process: p, exited: s.exited}, nil
}

// closeOnExit is a Process that closes exited when its Wait returns.
type closeOnExit struct {
	Process
	exited chan struct{}
}

func (p *closeOnExit) Wait() Exit {
	e := p.Process.Wait()
	close(p.exited)
	return e
}

func TestSSHConnectErrorsNameTheHost(t *testing.T) {
	s := startSSHD(t, "")
	dir := t.TempDir()
	otherKey := filepath.Join(dir, "other_key")
	writeKey(t, otherKey)
	emptyKnown := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(emptyKnown, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongKnown := filepath.Join(dir, "known_hosts_wrong")
	wrongKey := writeKey(t, filepath.Join(dir, "wrong_host_key"))
	if err := os.WriteFile(wrongKnown, []byte(fmt.Sprintf("[127.0.0.1]:%d %s", s.Port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(wrongKey))))), 0o600); err != nil {
		t.Fatal(err)
	}
	closed := closedPort(t)
	host := fmt.Sprintf("127.0.0.1:%d", s.Port)
	tests := []struct {
		name string
		edit func(*SSHConfig)
		want []string
	}{
		{"key refused", func(c *SSHConfig) { c.IdentityFiles = []string{otherKey} },
			[]string{"ssh to host " + currentUser() + "@" + host, "refused the login of user " + currentUser(), otherKey}},
		{"unknown host key", func(c *SSHConfig) { c.KnownHostsFiles = []string{emptyKnown} },
			[]string{"ssh to host", host, "is not in known_hosts", "--ssh-insecure-skip-hostkey"}},
		{"changed host key", func(c *SSHConfig) { c.KnownHostsFiles = []string{wrongKnown} },
			[]string{host, "does NOT match", "man-in-the-middle"}},
		{"unreachable", func(c *SSHConfig) { c.Port = closed },
			[]string{fmt.Sprintf("ssh to host %s@127.0.0.1:%d: unreachable", currentUser(), closed), "refused"}},
		{"user override", func(c *SSHConfig) {}, []string{"ssh to host nobody-hetsync@" + host}},
		{"no hetsync on the host", func(c *SSHConfig) { c.SupervisorCommand = []string{"/nonexistent/hetsync", "_supervise"} },
			[]string{"host 127.0.0.1: the supervisor `'/nonexistent/hetsync' '_supervise'` did not start", "--remote-hetsync"}},
		{"not a supervisor", func(c *SSHConfig) { c.SupervisorCommand = []string{"echo", "not a hetsync supervisor"} },
			[]string{"host 127.0.0.1: the supervisor", "not a hetsync supervisor stream"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := s.config()
			tc.edit(&cfg)
			hosts := []Host{{Name: "127.0.0.1", Slots: 1}}
			if tc.name == "user override" {
				hosts[0].User = "nobody-hetsync"
			}
			sp, err := NewSSHSpawner(cfg, hosts, []Slot{{Host: 0, LocalSize: 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			err = sp.Connect(testContext(t))
			if err == nil {
				t.Fatal("connected; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// The insecure mode connects despite the unknown key, and says so loudly.
	var log syncBuffer
	cfg := s.config()
	cfg.KnownHostsFiles, cfg.InsecureSkipHostKey, cfg.Log = nil, true, &log
	sp, err := NewSSHSpawner(cfg, []Host{{Name: "127.0.0.1", Slots: 1}}, []Slot{{Host: 0, LocalSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := sp.Connect(testContext(t)); err != nil {
		t.Fatalf("insecure connect: %v", err)
	}
	if !strings.Contains(log.String(), "WARNING") {
		t.Errorf("no warning for --ssh-insecure-skip-hostkey: %q", log.String())
	}
}

func TestSSHRendezvousOnRankZerosHost(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	hosts := []Host{{Name: "127.0.0.2", Slots: 1}, {Name: "127.0.0.1", Slots: 1}}
	sp, err := NewSSHSpawner(s.config(), hosts, []Slot{{Host: 0, LocalSize: 1}, {Host: 1, LocalSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx := testContext(t)
	rdv, err := sp.Rendezvous(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rdv, "127.0.0.2:") || strings.HasSuffix(rdv, ":0") {
		t.Errorf("rendezvous %q, want 127.0.0.2:PORT", rdv)
	}
	rdv, err = sp.Rendezvous(ctx, "lo")
	if err != nil || !strings.HasPrefix(rdv, "127.0.0.1:") {
		t.Errorf("--iface lo: rendezvous %q, %v; want 127.0.0.1:PORT", rdv, err)
	}
	if _, err := sp.Rendezvous(ctx, "no-such-if0"); err == nil || !strings.Contains(err.Error(), "no-such-if0") {
		t.Errorf("--iface no-such-if0: got %v, want an error naming it", err)
	}
}

// TestSSHManyRanksPerHost runs more ranks on a host than sshd's default MaxSessions (10
// sessions per connection): the host's one supervisor session carries all of them.
func TestSSHManyRanksPerHost(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	tests := []struct {
		hosts string
		np    int
	}{
		{"127.0.0.1:1", 1},
		{"127.0.0.1:11", 11},
		{"127.0.0.1:16,127.0.0.2:3", 19},
		{"127.0.0.1:64", 64},
	}
	for _, tc := range tests {
		t.Run(tc.hosts, func(t *testing.T) {
			hosts, err := ParseHostList(tc.hosts)
			if err != nil {
				t.Fatal(err)
			}
			place, err := Place(hosts, tc.np, false)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := NewSSHSpawner(s.config(), hosts, place)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			var stdout, stderr syncBuffer
			job := &Job{
				NP: tc.np, Command: []string{"sh", "-c", `echo "rank $HETSYNC_RANK local $HETSYNC_LOCAL_RANK/$HETSYNC_LOCAL_SIZE on $HETSYNC_HOSTNAME"`},
				Env: os.Environ(), Stdout: &stdout, Stderr: &stderr, Log: &stderr, Spawner: sp, Hosts: hosts, Placement: place,
				Rendezvous: "127.0.0.1:1",
			}
			if err := job.Run(testContext(t)); err != nil {
				t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
			}
			for r, sl := range place {
				want := fmt.Sprintf("[%d] rank %d local %d/%d on %s\n", r, r, sl.LocalRank, sl.LocalSize, hosts[sl.Host].Name)
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("no line %q in\n%s", want, stdout.String())
				}
			}
		})
	}
}
