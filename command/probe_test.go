package command

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/kernels/cuda"
	"github.com/hetsync/hetsync/metrics"
)

// Bad command lines found by probing the command: each fails up front, before any rank
// starts, with exit status 2 and the flag or command it is about.
func TestBadInputFailsUpFront(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	noDir, underFile := filepath.Join(dir, "nodir", "t.json"), filepath.Join(file, "t.json")
	mem := []string{"train", "--transport", "mem", "-np", "2", "--max-rounds", "1"}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"nosuchcmd"}, []string{`unknown command "nosuchcmd"`, "launch, bench, train, experiment, report, version"}},
		{[]string{"help", "nosuchcmd"}, []string{`unknown command "nosuchcmd"`}},
		{append(mem, "--model", "nosuch"), []string{`--model "nosuch"`, "cnn, mlp"}},
		{append(mem, "--join-timeout", "-1s"), []string{"--join-timeout -1s"}},
		{[]string{"launch", "-np", "2", "--join-timeout", "-1s", "true"}, []string{"--join-timeout -1s"}},
		{[]string{"bench", "-np", "2", "--join-timeout", "-1s"}, []string{"--join-timeout -1s"}},
		{append(mem, "--batch", "0"), []string{"--batch must be ≥ 1, got 0"}},
		{append(mem, "--batch", "-3"), []string{"--batch must be ≥ 1, got -3"}},
		{append(mem, "--lr", "0"), []string{"--lr must be a positive number, got 0"}},
		{append(mem, "--out", file), []string{"--out " + file, "is a file"}},
		{append(mem, "--out", filepath.Join(file, "sub")), []string{"--out " + filepath.Join(file, "sub"), "not a directory"}},
		{append(mem, "--out", run), []string{"--out " + run, "already holds a run"}},
		{[]string{"train", "-np", "2", "--max-rounds", "1", "--out", run}, []string{"--out " + run, "already holds a run"}},
		{[]string{"bench", "-np", "100000"}, []string{"--np 100000", "this host cannot hold"}},
		{[]string{"bench", "-np", "100000", "--transport", "mem"}, []string{"--np 100000", "--transport mem", "cannot hold"}},
		{[]string{"train", "-np", "100000", "--max-rounds", "1"}, []string{"--np 100000", "this host cannot hold"}},
		{[]string{"train", "-np", "10000000", "--max-rounds", "1", "--transport", "mem"}, []string{"--np 10000000", "cannot hold"}},
		{[]string{"launch", "-np", "10000000", "true"}, []string{"--np 10000000", "this host cannot hold"}},
		{[]string{"bench", "-np", "2", "--rendezvous", "127.0.0.1:"}, []string{`--rendezvous "127.0.0.1:"`}},
		{[]string{"launch", "-np", "2", "--rendezvous", "127.0.0.1:0", "true"}, []string{`--rendezvous "127.0.0.1:0"`}},
		{append(mem, "--timeline", noDir), []string{"--timeline " + noDir, "open " + filepath.Join(dir, "nodir", "t.rank0.json")}},
		{[]string{"train", "-np", "3", "--max-rounds", "1", "--timeline", underFile}, []string{"--timeline " + underFile, "not a directory"}},
		{[]string{"bench", "-np", "2", "--timeline", noDir}, []string{"--timeline " + noDir, "no such file or directory"}},
		{[]string{"bench", "-np", "5", "--transport", "mem", "--timeline", underFile}, []string{"--timeline " + underFile, "not a directory"}},
		{[]string{"launch", "-np", "2", "--timeline", noDir, "true"}, []string{"--timeline " + noDir, "t.rank0.json"}},
	}
	tests = append(tests, struct {
		args []string
		want []string
	}{append(mem, "--data", dir), []string{"--data " + dir + ": missing train-images-idx3-ubyte"}})
	if !cuda.Built {
		tests = append(tests, struct {
			args []string
			want []string
		}{append(mem, "--device", "cpu,cuda:0"), []string{"--device cpu,cuda:0: this binary was built without CUDA support"}})
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(run, "metrics.jsonl")); err == nil {
		t.Errorf("a refused --out %s was written to", run)
	}
}

// The timeline check creates nothing it leaves behind, leaves an existing trace as it was,
// reads HETSYNC_TIMELINE when the flag is not given (the flag wins), and names the flag or the
// variable, the rank and the file it cannot write.
func TestCheckTimelineFiles(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.rank1.json")
	if err := os.WriteFile(old, []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirFile := filepath.Join(dir, "ro.rank2.json")
	if err := os.Mkdir(dirFile, 0o755); err != nil { // not even root opens a directory for writing
		t.Fatal(err)
	}
	tests := []struct {
		name string
		flag string // "" not given
		env  string
		np   int
		want []string // nil: no error
	}{
		{"nothing asked", "", "", 9, nil},
		{"new files", filepath.Join(dir, "t.json"), "", 7, nil},
		{"one rank", filepath.Join(dir, "t"), "", 1, nil},
		{"an earlier trace", filepath.Join(dir, "old.json"), "", 3, nil},
		{"a rank's file is a directory", filepath.Join(dir, "ro.json"), "", 4, []string{"--timeline " + filepath.Join(dir, "ro.json"), "rank 2", dirFile}},
		{"the variable", "", filepath.Join(dir, "no", "t.json"), 2, []string{"HETSYNC_TIMELINE=" + filepath.Join(dir, "no", "t.json"), "rank 0", filepath.Join(dir, "no", "t.rank0.json")}},
		{"the flag wins", filepath.Join(dir, "t.json"), filepath.Join(dir, "no", "t.json"), 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := watchOptions{Timeline: tc.flag, set: map[string]bool{"timeline": tc.flag != ""}}
			err := w.checkTimelineFiles(tc.np, func(k string) string {
				if k == "HETSYNC_TIMELINE" {
					return tc.env
				}
				return ""
			})
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != nil && err == nil:
				t.Errorf("no error, want one saying %q", tc.want)
			}
			for _, w := range tc.want {
				if err != nil && !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			ents, _ := os.ReadDir(dir)
			var kept []string
			for _, e := range ents {
				kept = append(kept, e.Name())
			}
			if want := []string{"old.rank1.json", "ro.rank2.json"}; !slices.Equal(kept, want) {
				t.Errorf("files after the check: %q, want %q", kept, want)
			}
		})
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "[]" {
		t.Errorf("the earlier trace %s after the checks: %q, %v", old, b, err)
	}
}

func TestPrepareRunDir(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"new, with parents", filepath.Join(dir, "a", "b", "c"), ""},
		{"existing empty", empty, ""},
		{"under /proc", "/proc/hetsync-no-such-dir", "cannot create"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lock, err := prepareRunDir(tc.path)
			lock.Close()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("prepareRunDir(%s): %v", tc.path, err)
			case tc.want == "":
				// Only the job's lock is left.
				ents, err := os.ReadDir(tc.path)
				if err != nil || len(ents) != 1 || ents[0].Name() != metrics.LockFile {
					t.Errorf("%s after the check: %v, entries %v left; want only %s", tc.path, err, ents, metrics.LockFile)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--out "+tc.path):
				t.Errorf("prepareRunDir(%s) = %v, want an error naming --out and %q", tc.path, err, tc.want)
			}
		})
	}
}

func TestCheckHostHolds(t *testing.T) {
	tests := []struct {
		np             int
		perRank, avail uint64
		refused        bool
	}{
		{1, 1 << 20, 1 << 30, false},
		{1024, 1 << 20, 1 << 30, false},
		{1025, 1 << 20, 1 << 30, true},
		{9, 1 << 30, 8 << 30, true},
		{100000, 32 << 20, 0, false}, // memory unknown: nothing refused
		{0, 1 << 20, 1 << 20, false},
	}
	for _, tc := range tests {
		err := checkHostHolds(tc.np, tc.perRank, tc.avail, "this host")
		if (err != nil) != tc.refused {
			t.Errorf("checkHostHolds(%d, %d, %d) = %v, refused want %v", tc.np, tc.perRank, tc.avail, err, tc.refused)
		}
	}
}

func TestAvailableMemoryReadsTheHost(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	if err := os.WriteFile(meminfo, []byte("MemTotal:  2048 kB\nMemFree:  10 kB\nMemAvailable:    1024 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := memAvailable(meminfo); got != 1<<20 {
		t.Errorf("memAvailable = %d, want %d", got, 1<<20)
	}
	for name, v := range map[string]string{"memory.max": "3000\n", "memory.current": "1000\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := cgroupHeadroom(dir); got != 2000 {
		t.Errorf("cgroupHeadroom = %d, want 2000", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cgroupHeadroom(dir); got != 0 {
		t.Errorf("cgroupHeadroom without a limit = %d, want 0", got)
	}
}

// A rendezvous port that another program holds is an error saying so, from rank 0, without
// libp2p's own log lines before it.
func TestBusyRendezvousPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	code, _, stderr := runBinary(t, "bench", "-np", "2", "--rendezvous", addr, "-b", "4", "-e", "4", "-n", "1", "-w", "0")
	if code == 0 {
		t.Fatalf("bench at a taken rendezvous port succeeded:\n%s", stderr)
	}
	want := "rank 0: the rendezvous address " + addr + ": port " + port + " is already in use on this host"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	for _, internal := range []string{"level=", "system=fx", "OnStart hook"} {
		if strings.Contains(stderr, internal) {
			t.Errorf("stderr has libp2p's internal log (%q):\n%s", internal, stderr)
		}
	}
}

// A -np that this process's own memory limits (ulimit -v, ulimit -d) cannot hold is refused
// before any rank starts, naming the limit, rather than crashing out of memory half-started.
func TestNPUnderProcessLimits(t *testing.T) {
	for _, limit := range []string{"-v", "-d"} {
		cmd := exec.Command("sh", "-c", `ulimit `+limit+` 3000000 && exec "$0" bench --transport mem -np 5000 -b 4K -e 4K -n 1 -w 0`, hetsyncBinary(t))
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--np 5000") || !strings.Contains(string(out), "(ulimit "+limit+")") {
			t.Errorf("ulimit %s 3000000: exit %d (%v); want exit 2 and an error naming --np 5000 and the limit:\n%.2000s", limit, code, err, out)
		}
	}
}

// bench -J is checked before the benchmark runs, not after it has thrown the results away.
func TestBenchJSONPathCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{dir, "-J " + dir + ": is a directory"},
		{filepath.Join(dir, "no", "such", "dir", "r.json"), "-J " + filepath.Join(dir, "no", "such", "dir", "r.json") + ": cannot create it"},
	} {
		code, _, stderr := runCLI(t, "bench", "-np", "2", "-b", "4K", "-e", "4K", "-n", "1", "-J", tc.path)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("-J %s: exit %d, stderr %q; want exit 2 and %q", tc.path, code, stderr, tc.want)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the checks left %v (%v) in %s", ents, err, dir)
	}
}
