package schedpolicy

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary a child process of TestApplyEveryThread: the value is
// "START/POLICY", the policy its threads start under and the policy it applies.
const childEnv = "SCHEDPOLICY_TEST_CHILD"

// The policy reaches every thread of a process: the threads it had when Apply ran and the
// threads the Go runtime starts afterwards. Each thread's policy is read back from outside
// the process, as field 41 of /proc/PID/task/TID/stat.
func TestApplyEveryThread(t *testing.T) {
	tests := []struct {
		start  string // the policy the child's threads run under before Apply
		policy Policy
		want   int
	}{
		{"normal", Batch, unix.SCHED_BATCH},
		{"normal", Inherit, unix.SCHED_NORMAL},
		{"idle", Batch, unix.SCHED_IDLE}, // never promoted to batch
		{"batch", Inherit, unix.SCHED_BATCH},
	}
	for _, tc := range tests {
		t.Run(tc.start+"/"+string(tc.policy), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestApplyEveryThread$")
			cmd.Env = append(os.Environ(), childEnv+"="+tc.start+"/"+string(tc.policy))
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				_ = cmd.Wait()
			}()
			before, after := readChild(t, stdout)
			tids, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if len(tids) <= before || after <= before {
				t.Fatalf("the child has %d threads (%d when it applied the policy, %d after): no thread started after Apply", len(tids), before, after)
			}
			for _, path := range tids {
				pol, err := statPolicy(path)
				if err != nil {
					t.Fatal(err)
				}
				if pol != tc.want {
					t.Errorf("%s: policy %s, want %s", path, Name(pol), Name(tc.want))
				}
			}
		})
	}
}

// readChild reads the child's two lines: how many threads it had when it applied the policy,
// and how many once it had started more.
func readChild(t *testing.T, r io.Reader) (before, after int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "threads %d %d", &before, &after); err == nil {
			return before, after
		}
	}
	t.Fatalf("the child ended without reporting its threads: %v", sc.Err())
	return 0, 0
}

// statPolicy is field 41 of a /proc/.../stat file; the fields are counted after the command
// name, which may hold spaces and parentheses.
func statPolicy(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	fields := strings.Fields(s[i+1:]) // fields 3 onwards
	if i < 0 || len(fields) < 41-2 {
		return 0, fmt.Errorf("%s: %d fields", path, len(fields)+2)
	}
	return strconv.Atoi(fields[41-3])
}

// TestMain runs the child of TestApplyEveryThread when asked to.
func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(child(v))
	}
	os.Exit(m.Run())
}

// child starts its threads under start, applies the policy, starts more threads (goroutines
// locked to threads and blocked in a system call), reports and waits for stdin to close.
func child(spec string) int {
	start, policy, _ := strings.Cut(spec, "/")
	starts := map[string]int{"normal": unix.SCHED_NORMAL, "idle": unix.SCHED_IDLE, "batch": unix.SCHED_BATCH}
	if s := starts[start]; s != unix.SCHED_NORMAL {
		if err := setAll(unix.SCHED_NORMAL, s); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
	}
	p, err := Parse(policy, childEnv)
	if err == nil {
		_, err = Apply(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	before, _ := threads(os.Getpid())
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	started := make(chan struct{})
	for range 8 {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			var b [1]byte
			_, _ = r.Read(b[:]) // blocks its thread until the pipe closes
		}()
	}
	for range 8 {
		<-started
	}
	after, _ := threads(os.Getpid())
	fmt.Printf("threads %d %d\n", len(before), len(after))
	_, _ = io.Copy(io.Discard, os.Stdin)
	w.Close()
	return 0
}
