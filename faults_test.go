package hetsync_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fault tests that need a machine of their own run in private namespaces: a mount
// namespace (their own /dev/shm, a small or read-only file system to write to), a network
// namespace (every listening socket in it is the job's) and a PID namespace (every process in
// it is the job's), so that what they check is not muddled by whatever else the host runs.
// The test re-runs its own binary under unshare(1) with these variables set.
const (
	envFaultsChild = "HETSYNC_FAULTS_CHILD" // the test the child runs
	envFaultsBin   = "HETSYNC_FAULTS_BIN"   // the hetsync binary, built by the parent
	envFaultsHello = "HETSYNC_FAULTS_HELLO" // examples/hello, built by the parent
)

// inPrivateNamespaces says whether t is the child that runs in the private namespaces (and
// then returns the binaries to run); otherwise it runs that child, reports its verdict as
// t's, and returns ok false. Outside CI, a host where unshare is not allowed (not root) skips t;
// under CI (CI=true, root) it fails it.
func inPrivateNamespaces(t *testing.T) (hetsyncBin, helloBin string, ok bool) {
	t.Helper()
	if os.Getenv(envFaultsChild) == t.Name() {
		// the new network namespace's loopback starts down
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v: %s", err, out)
		}
		return os.Getenv(envFaultsBin), os.Getenv(envFaultsHello), true
	}
	hetsyncBin, helloBin = binaries(t)
	if err := exec.Command("unshare", "--mount", "--net", "--pid", "--fork", "true").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("unshare --mount --net --pid: %v (CI runs as root)", err)
		}
		t.Skipf("unshare --mount --net --pid: %v: run as root for the tests in private namespaces", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envFaultsChild+"="+t.Name(), envFaultsBin+"="+hetsyncBin, envFaultsHello+"="+helloBin)
	out, err := cmd.CombinedOutput()
	t.Logf("in private namespaces:\n%s", out)
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test in private namespaces failed: %v", err)
	}
	return "", "", false
}

// mountTmpfs mounts a tmpfs of the given options on a new directory under t's temporary
// directory (in the child's own mount namespace, so nothing outlives it).
func mountTmpfs(t *testing.T, dir, opts string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount -t tmpfs -o %s %s: %v", opts, dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// runJob runs argv (the environment cleaned of launchers' variables) with a deadline and
// returns its exit code and combined output.
func runJob(t *testing.T, argv ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after 3 minutes:\n%s", strings.Join(argv, " "), out)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// Fifty jobs in a row, of every kind a user starts (bench over each data path, train, a
// user's program under launch, with and without a timeline), each exiting 0 and leaving
// nothing behind: no process, no shared-memory file, no socket file, no listening socket.
func TestJobsLeaveNothingBehind(t *testing.T) {
	hetsyncBin, helloBin, ok := inPrivateNamespaces(t)
	if !ok {
		return
	}
	mountTmpfs(t, "/dev/shm", "size=256m")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the ranks' Unix socket files go there
	paths := []string{"auto", "tcp", "unix", "stream", "tls", "shm"}
	for i := range 50 {
		np := strconv.Itoa(1 + i%4)
		var argv []string
		switch {
		case i%25 == 0:
			argv = []string{hetsyncBin, "train", "-np", "2", "--max-rounds", "2", "--eval-every", "100",
				"--out", filepath.Join(t.TempDir(), "run")}
		case i%10 == 5:
			argv = []string{hetsyncBin, "launch", "-np", np, "--", helloBin}
		default:
			argv = []string{hetsyncBin, "bench", "-np", np, "-b", "4K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1",
				"--data-path", paths[i%len(paths)], "--security", "none"}
			if i%7 == 3 {
				argv = append(argv, "--timeline", filepath.Join(t.TempDir(), "trace.json"))
			}
		}
		code, out := runJob(t, argv...)
		if code != 0 {
			t.Fatalf("job %d (%s): exit %d:\n%s", i, strings.Join(argv[1:], " "), code, out)
		}
		if left := leftBehind(tmp); len(left) > 0 {
			t.Fatalf("job %d (%s) left behind:\n  %s\noutput:\n%s", i, strings.Join(argv[1:], " "), strings.Join(left, "\n  "), out)
		}
	}
}

// leftBehind lists what the jobs of this namespace left: processes other than this one (a
// rank that exits after its launcher waits for nothing, so it is given a few seconds to
// go), files in /dev/shm and tmp, and listening TCP sockets.
func leftBehind(tmp string) []string {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = otherProcesses()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, dir := range []string{"/dev/shm", tmp} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			left = append(left, "file "+filepath.Join(dir, e.Name()))
		}
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ...: state 0A is LISTEN
			if fs := strings.Fields(line); len(fs) > 3 && fs[3] == "0A" {
				left = append(left, "listening socket "+f+": "+strings.Join(fs[:4], " "))
			}
		}
	}
	return left
}

// otherProcesses lists the processes of this PID namespace other than this one.
func otherProcesses() []string {
	var procs []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		if pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(s)
		if err != nil {
			continue // gone meanwhile
		}
		procs = append(procs, "process "+string(bytes.TrimSpace(stat)))
	}
	return procs
}

// A run directory on a disk that fills (a 64 KiB tmpfs) and a timeline on one: the job fails,
// its error names the file it could not write, and what was written before stays readable
// (whole JSON lines, the run's config). Training stops at the first record the run directory
// could not take, not when its stop rule says.
func TestDiskFills(t *testing.T) {
	hetsyncBin, _, ok := inPrivateNamespaces(t)
	if !ok {
		return
	}
	t.Run("train --out", func(t *testing.T) {
		full := mountTmpfs(t, filepath.Join(t.TempDir(), "full"), "size=64k")
		run := filepath.Join(full, "run")
		code, out := runJob(t, hetsyncBin, "train", "-np", "2", "--max-time", "40s", "--eval-every", "100", "--out", run)
		t.Logf("exit %d:\n%s", code, lastLines(out, 6))
		if code == 0 || !strings.Contains(out, run+"/") || !strings.Contains(out, "no space left on device") {
			t.Fatalf("exit %d; want a failure naming a file under %s and the full disk:\n%s", code, run, out)
		}
		if strings.Contains(out, "done: reached the time limit of") || !strings.Contains(out, "done: stopped: metrics: ") {
			t.Errorf("rank 0 did not stop the job at the first record its run directory could not take:\n%s", out)
		}
		var cfg map[string]any
		if b, err := os.ReadFile(filepath.Join(run, "config.json")); err != nil || json.Unmarshal(b, &cfg) != nil {
			t.Errorf("config.json of the run: %v, %q", err, b)
		}
		// The metrics are written as the job runs (which files hold them is the run
		// directory's business): every whole line of every one is readable, and some are there.
		lines := 0
		_ = filepath.WalkDir(run, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".jsonl") {
				lines += wholeJSONLines(t, path)
			}
			return nil
		})
		if lines == 0 {
			t.Errorf("no .jsonl file of %s holds a whole line", run)
		}
	})
	t.Run("--timeline", func(t *testing.T) {
		full := mountTmpfs(t, filepath.Join(t.TempDir(), "full"), "size=64k")
		trace := filepath.Join(full, "trace.json")
		code, out := runJob(t, hetsyncBin, "bench", "-np", "2", "-b", "4K", "-e", "1M", "-f", "2", "-n", "20", "-w", "1",
			"--timeline", trace)
		t.Logf("exit %d:\n%s", code, lastLines(out, 4))
		if code == 0 || !strings.Contains(out, "timeline: write "+full+"/trace.rank") || !strings.Contains(out, "no space left on device") {
			t.Fatalf("exit %d; want a failure naming the timeline file and the full disk:\n%s", code, out)
		}
	})
}

// wholeJSONLines checks that every whole line of the file at path (a line the disk took to
// its end) is a JSON object, and returns how many there are.
func wholeJSONLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return 0
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b[:bytes.LastIndexByte(b, '\n')+1]))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("%s line %d: %v: %q", path, n+1, err, sc.Bytes())
		}
		n++
	}
	return n
}

// An --out or --timeline on a read-only file system (which root cannot write either): bench
// and train refuse the flag before any rank starts (exit 2, naming the flag and the file).
func TestUnwritableOut(t *testing.T) {
	hetsyncBin, _, ok := inPrivateNamespaces(t)
	if !ok {
		return
	}
	ro := mountTmpfs(t, filepath.Join(t.TempDir(), "ro"), "ro,size=64k")
	for _, tc := range []struct {
		name string
		argv []string
		code int
		want []string
	}{
		{"train --out", []string{"train", "-np", "2", "--max-rounds", "2", "--out", ro + "/run"}, 2,
			[]string{"--out " + ro + "/run: cannot create the run directory", "read-only file system"}},
		{"bench --timeline", []string{"bench", "-np", "2", "-b", "4K", "-e", "4K", "-n", "1", "--timeline", ro + "/t.json"}, 2,
			[]string{"--timeline " + ro + "/t.json: rank 0 cannot write its timeline: open " + ro + "/t.rank0.json: read-only file system"}},
		{"train --timeline", []string{"train", "-np", "2", "--max-rounds", "2", "--out", t.TempDir() + "/run", "--timeline", ro + "/t.json"}, 2,
			[]string{"--timeline " + ro + "/t.json: rank 0 cannot write its timeline", "read-only file system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runJob(t, append([]string{hetsyncBin}, tc.argv...)...)
			t.Logf("exit %d:\n%s", code, lastLines(out, 4))
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			if tc.code == 2 && strings.Contains(out, "[0]") {
				t.Errorf("a rank started although the flag was refused:\n%s", out)
			}
		})
	}
}
