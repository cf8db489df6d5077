package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a rank (see TestMain).
const helperEnv = "LAUNCHER_TEST_HELPER"

// TestMain lets the test binary serve as the rank program: with helperEnv set it runs the
// named behaviour instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode == "supervise" {
		if err := Supervise(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	} else if mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(EnvRank))
	switch mode {
	case "env":
		for _, k := range []string{EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalSize, EnvRendezvous, EnvSecret, "RANK", "WORLD_SIZE", "LOCAL_RANK"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		fmt.Fprintf(os.Stderr, "stderr of rank %d\n", rank)
		return 0
	case "lines":
		// Many lines from two goroutines, written in small pieces.
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					line := fmt.Sprintf("rank %d goroutine %d line %d\n", rank, g, i)
					w := os.Stdout // each stream has one writer goroutine
					if g == 1 {
						w = os.Stderr
					}
					for j := 0; j < len(line); j += 5 {
						_, _ = w.WriteString(line[j:min(j+5, len(line))])
					}
				}
			}(g)
		}
		wg.Wait()
		return 0
	case "fail-rank-1":
		if rank == 1 {
			fmt.Println("rank 1 exiting with 3")
			return 3
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "grandchild":
		// Start a grandchild and report its pid, then sleep: stopping the rank must stop it too.
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Printf("grandchild %d\n", c.Process.Pid)
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "leave-early", "freeze":
		return blameHelper(mode, rank)
	case "kill-self":
		if rank == 0 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Hour)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

func helperJob(t *testing.T, np int, mode string, stdout, stderr *syncBuffer) *Job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &Job{
		NP:      np,
		Command: []string{exe, "-test.run=^$"},
		Env:     append(os.Environ(), helperEnv+"="+mode),
		Stdout:  stdout,
		Stderr:  stderr,
		Grace:   500 * time.Millisecond,
	}
}

// syncBuffer is a bytes.Buffer that can be read while ranks write to it, and that signals when
// a given number of lines containing a marker have been written.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	want   int
	seen   int
	ready  chan struct{}
}

func newSyncBuffer(marker string, want int) *syncBuffer {
	return &syncBuffer{marker: marker, want: want, ready: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.marker != "" && bytes.Contains(p, []byte(b.marker)) {
		b.seen++
		if b.seen == b.want {
			close(b.ready)
		}
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestJobEnvironmentAndPrefix(t *testing.T) {
	const np = 3
	out, errb := newSyncBuffer("", 0), newSyncBuffer("", 0)
	job := helperJob(t, np, "env", out, errb)
	job.Secret = "c0ffeec0ffeec0ffeec0ffeec0ffeec0"
	if err := job.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, errb.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got[line] = "x"
	}
	var rdv string
	for r := 0; r < np; r++ {
		p := fmt.Sprintf("[%d] ", r)
		for _, kv := range []string{
			EnvRank + "=" + strconv.Itoa(r), EnvWorldSize + "=3", EnvLocalRank + "=" + strconv.Itoa(r),
			EnvLocalSize + "=3", EnvSecret + "=c0ffeec0ffeec0ffeec0ffeec0ffeec0", "RANK=" + strconv.Itoa(r), "WORLD_SIZE=3",
			"LOCAL_RANK=" + strconv.Itoa(r),
		} {
			if got[p+kv] == "" {
				t.Errorf("missing line %q in output:\n%s", p+kv, out.String())
			}
		}
		if !strings.Contains(errb.String(), fmt.Sprintf("[%d] stderr of rank %d\n", r, r)) {
			t.Errorf("rank %d's stderr line missing or not prefixed:\n%s", r, errb.String())
		}
	}
	m := regexp.MustCompile(`(?m)^\[\d\] HETSYNC_RENDEZVOUS=(127\.0\.0\.1:\d+)$`).FindAllStringSubmatch(out.String(), -1)
	if len(m) != np {
		t.Fatalf("want %d rendezvous lines, got %v", np, m)
	}
	for _, x := range m {
		if rdv == "" {
			rdv = x[1]
		}
		if x[1] != rdv {
			t.Errorf("ranks got different rendezvous addresses: %q and %q", rdv, x[1])
		}
	}
}

func TestJobOutputLinesDoNotInterleave(t *testing.T) {
	out, errb := newSyncBuffer("", 0), newSyncBuffer("", 0)
	job := helperJob(t, 4, "lines", out, errb)
	job.UnprefixedRank0 = true
	if err := job.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, stream := range []struct {
		name, text string
		g          int
	}{{"stdout", out.String(), 0}, {"stderr", errb.String(), 1}} {
		counts := map[int]int{}
		sc := bufio.NewScanner(strings.NewReader(stream.text))
		re := regexp.MustCompile(`^(\[(\d)\] )?rank (\d) goroutine (\d) line \d+$`)
		for sc.Scan() {
			m := re.FindStringSubmatch(sc.Text())
			if m == nil {
				t.Fatalf("%s: malformed line %q", stream.name, sc.Text())
			}
			r, _ := strconv.Atoi(m[3])
			if (r == 0) != (m[1] == "") || (r != 0 && m[2] != m[3]) {
				t.Errorf("%s: line %q has the wrong prefix", stream.name, sc.Text())
			}
			counts[r]++
		}
		for r := 0; r < 4; r++ {
			if counts[r] != 200 {
				t.Errorf("%s: rank %d wrote %d lines, want 200", stream.name, r, counts[r])
			}
		}
	}
}

func TestJobFirstFailureStopsTheOthers(t *testing.T) {
	tests := []struct {
		name     string
		mode     string
		np       int
		wantRank int
		wantExit Exit
		wantCode int
	}{
		{"exit status", "fail-rank-1", 4, 1, Exit{Code: 3}, 3},
		{"signal", "kill-self", 3, 0, Exit{Code: -1, Signal: syscall.SIGKILL}, 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errb := newSyncBuffer("", 0), newSyncBuffer("", 0)
			logb := newSyncBuffer("", 0)
			job := helperJob(t, tc.np, tc.mode, out, errb)
			job.Log = logb
			err := job.Run(context.Background())
			var f *RankFailure
			if !errors.As(err, &f) {
				t.Fatalf("Run = %v, want a *RankFailure", err)
			}
			if got := f.Exit; got.At.IsZero() || f.Rank != tc.wantRank || withoutTime(got) != tc.wantExit {
				t.Errorf("failure = rank %d %+v, want rank %d %+v", f.Rank, f.Exit, tc.wantRank, tc.wantExit)
			}
			if ExitCode(err) != tc.wantCode {
				t.Errorf("ExitCode = %d, want %d", ExitCode(err), tc.wantCode)
			}
			msg := fmt.Sprintf("rank %d failed first: %v", tc.wantRank, tc.wantExit)
			if !strings.HasPrefix(err.Error(), msg) {
				t.Errorf("error %q does not start with %q", err, msg)
			}
			if !strings.Contains(logb.String(), fmt.Sprintf("rank %d failed", tc.wantRank)) {
				t.Errorf("launcher log does not name the rank: %q", logb.String())
			}
		})
	}
}

func TestJobSIGKILLAfterGrace(t *testing.T) {
	out := newSyncBuffer("ready", 2)
	job := helperJob(t, 2, "ignore-term", out, newSyncBuffer("", 0))
	job.Grace = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-out.ready; cancel() }()
	err := job.Run(ctx)
	var in *Interrupted
	if !errors.As(err, &in) || in.Stopped != 2 {
		t.Fatalf("Run = %v, want *Interrupted with 2 stopped ranks", err)
	}
	if ExitCode(err) != 130 {
		t.Errorf("ExitCode = %d, want 130", ExitCode(err))
	}
}

func TestJobCancelStopsRanksAndTheirChildren(t *testing.T) {
	const np = 3
	out := newSyncBuffer("ready", np)
	job := helperJob(t, np, "grandchild", out, newSyncBuffer("", 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-out.ready; cancel() }()
	if err := job.Run(ctx); !errors.As(err, new(*Interrupted)) {
		t.Fatalf("Run = %v, want *Interrupted", err)
	}
	pids := regexp.MustCompile(`grandchild (\d+)`).FindAllStringSubmatch(out.String(), -1)
	if len(pids) != np {
		t.Fatalf("want %d grandchild pids, output:\n%s", np, out.String())
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[1])
		if !eventuallyDead(pid) {
			t.Errorf("grandchild %d of a stopped rank is still running", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestJobStartFailure(t *testing.T) {
	job := &Job{NP: 2, Command: []string{"/nonexistent/hetsync-rank"}}
	err := job.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "starting rank 0 of 2") {
		t.Fatalf("Run = %v, want an error about starting rank 0", err)
	}
}

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		want string
	}{
		{"no ranks", Job{NP: 0, Command: []string{"true"}}, "-np 0"},
		{"no command", Job{NP: 1}, "no command"},
		{"bad secret", Job{NP: 1, Command: []string{"true"}, Secret: "zz"}, "job secret"},
		{"short secret", Job{NP: 1, Command: []string{"true"}, Secret: "ab"}, "job secret: too short"},
		{"bad rendezvous", Job{NP: 1, Command: []string{"true"}, Rendezvous: "nohost"}, "rendezvous"},
		{"rendezvous without a port", Job{NP: 1, Command: []string{"true"}, Rendezvous: "127.0.0.1:"}, `--rendezvous "127.0.0.1:"`},
		{"rendezvous port 0", Job{NP: 1, Command: []string{"true"}, Rendezvous: "127.0.0.1:0"}, "a port in [1, 65535]"},
		{"rendezvous port too big", Job{NP: 1, Command: []string{"true"}, Rendezvous: "h:65536"}, "a port in [1, 65535]"},
		{"rendezvous without a host", Job{NP: 1, Command: []string{"true"}, Rendezvous: ":29400"}, "with a host"},
		{"negative grace", Job{NP: 1, Command: []string{"true"}, Grace: -1}, "grace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.job.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestJobCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	job := helperJob(t, 2, "sleep", newSyncBuffer("", 0), newSyncBuffer("", 0))
	if err := job.Run(ctx); !errors.As(err, new(*Interrupted)) {
		t.Fatalf("Run = %v, want *Interrupted", err)
	}
}

func TestJobKillsWhatARankLeavesBehind(t *testing.T) {
	// The rank starts a background sleep (holding no output pipe) and exits 0.
	var out syncBuffer
	job := &Job{NP: 1, Command: []string{"sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"}, Stdout: &out}
	if err := job.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(out.String()), "[0] "))
	if err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	// SIGKILL was sent before Run returned; delivery is asynchronous, so wait (bounded by a
	// generous limit, not a timing assertion) for the process to be dead or gone.
	if !eventuallyDead(pid) {
		t.Errorf("background child %d of a finished rank is still running", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// eventuallyDead reports whether the sleep process pid is dead (zombie) or gone within 30 s.
func eventuallyDead(pid int) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || !strings.Contains(string(stat), "(sleep)") {
			return true
		}
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			return true
		}
	}
	return false
}
