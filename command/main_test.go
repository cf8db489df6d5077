package command

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/launcher"
)

// runCLI runs the command line in this process and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, append([]string{"hetsync"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--np", "2", "--collective", "ring,nope"}, `--collective: unknown algorithm "nope" (known: `},
		{[]string{"bench", "--np", "2", "--collective", ","}, "--collective"},
		{[]string{"bench", "--np", "2", "--op", "gather"}, "--op: unknown op"},
		{[]string{"bench", "--np", "2", "-b", "4Q"}, "-b: size \"4Q\""},
		{[]string{"bench", "--np", "2", "-e", ""}, "-e: size"},
		{[]string{"bench", "--np", "2", "-b", "64K", "-e", "4K"}, "-e 4K is smaller than -b 64K"},
		{[]string{"bench", "--np", "2", "-f", "1"}, "-f 1"},
		{[]string{"bench", "--np", "2", "-n", "0"}, "-n 0"},
		{[]string{"bench", "--np", "2", "-w", "-1"}, "-w -1"},
		{[]string{"bench", "--np", "2", "-c", "-2"}, "-c -2"},
		{[]string{"bench", "--np", "2", "-r", "2"}, "-r 2"},
		{[]string{"bench", "--np", "2", "-o", "mean"}, "-o: unknown reduction"},
		{[]string{"bench", "--np", "2", "--format", "csv"}, "--format: unknown format"},
		{[]string{"bench", "--np", "2", "--transport", "udp"}, `--transport "udp"`},
		{[]string{"bench", "--np", "2", "--data-path", "rdma"}, `--data-path "rdma"`},
		{[]string{"bench", "--np", "2", "--security", "noise"}, `--security "noise"`},
		{[]string{"bench", "--np", "2", "--arena", "maybe"}, `--arena "maybe"`},
		{[]string{"bench", "--np", "2", "--codec", "lz4"}, `--codec "lz4"`},
		{[]string{"bench", "--np", "2", "--collective", "ps", "--servers", "3"}, "--servers 3"},
		{[]string{"bench", "--np", "2", "--collective", "ring", "--servers", "1"}, "--servers 1: only the ps collective"},
		{[]string{"bench", "--np", "2", "--replan", "every=x"}, "--replan: "},
		{[]string{"bench", "--np", "2", "--segment", "big"}, "--segment"},
		{[]string{"bench", "--np", "2", "--metrics-addr", "localhost"}, `--metrics-addr "localhost": want HOST:PORT`},
		{[]string{"bench", "--np", "2", "--metrics-addr", "127.0.0.1:70000"}, `--metrics-addr "127.0.0.1:70000": port`},
		{[]string{"bench", "--np", "-1"}, "--np -1"},
		{[]string{"bench", "--transport", "mem"}, "--transport mem needs --np"},
		{[]string{"bench", "--np", "2", "extra"}, "unexpected arguments"},
		{[]string{"bench", "--bogus"}, "bogus"},
		{[]string{"launch", "-np", "0", "true"}, "--np 0"},
		{[]string{"launch", "-np", "2"}, "no command given"},
		{[]string{"launch", "true"}, "np"},
		{[]string{"launch", "-np", "2", "--collective", "tree", "true"}, `--collective "tree": unknown`},
		{[]string{"launch", "-np", "2", "--data-path", "rdma", "true"}, `--data-path "rdma"`},
		{[]string{"launch", "-np", "2", "--security", "noise", "true"}, `--security "noise"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// Every error that errors.Join joined, however deep in a wrapped error, prints on its own
// "hetsync: " line.
func TestPrintErrorLinePerError(t *testing.T) {
	a, b, c := errors.New("rank 0: write run/metrics.jsonl: no space left on device"), errors.New("recording the early end: no space"), errors.New("third")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"one", a, "hetsync: " + a.Error() + "\n"},
		{"joined", errors.Join(a, b), "hetsync: " + a.Error() + "\nhetsync: " + b.Error() + "\n"},
		{"wrapped join of three", fmt.Errorf("train: %w", errors.Join(a, b, c)), "hetsync: train: " + a.Error() + "\nhetsync: " + b.Error() + "\nhetsync: third\n"},
		{"a usage error", usageError{errors.Join(a, nil, b)}, "hetsync: " + a.Error() + "\nhetsync: " + b.Error() + "\n"},
		{"a trailing newline", errors.New("x\n"), "hetsync: x\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printError(&out, tc.err)
			if out.String() != tc.want {
				t.Errorf("printed %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "hetsync ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// tsvTable is one table of `bench --format tsv` output.
type tsvTable struct {
	meta string
	rows []map[string]string
}

// parseTSV reads bench's TSV the way shared/peers/summarize.py does.
func parseTSV(t *testing.T, s string) []tsvTable {
	t.Helper()
	var tabs []tsvTable
	var hdr []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "# "):
			tabs = append(tabs, tsvTable{meta: line})
		case strings.HasPrefix(line, "#"):
			hdr = strings.Split(line[1:], "\t")
		default:
			parts := strings.Split(line, "\t")
			if len(tabs) == 0 || len(parts) != len(hdr) {
				t.Fatalf("stray line %q in TSV output:\n%s", line, s)
			}
			row := map[string]string{}
			for i, h := range hdr {
				row[h] = parts[i]
			}
			tabs[len(tabs)-1].rows = append(tabs[len(tabs)-1].rows, row)
		}
	}
	// The harness's columns first, in its order; then the attribution's.
	want := "bytes count iters avg_us min_us max_us algbw_GBps busbw_GBps check skew_us late_rank"
	if strings.Join(hdr, " ") != want {
		t.Fatalf("TSV header %q, want %q", hdr, want)
	}
	return tabs
}

func checkAllOK(t *testing.T, tabs []tsvTable, p int, collectives []string, sizes []int) {
	t.Helper()
	if len(tabs) != len(collectives) {
		t.Fatalf("%d tables, want %d (%v)", len(tabs), len(collectives), collectives)
	}
	for i, tab := range tabs {
		wantMeta := fmt.Sprintf("# hetsync bench P=%d collective=%s op=allreduce", p, collectives[i])
		if tab.meta != wantMeta {
			t.Errorf("table %d meta %q, want %q", i, tab.meta, wantMeta)
		}
		if len(tab.rows) != len(sizes) {
			t.Errorf("%s: %d rows, want %d", collectives[i], len(tab.rows), len(sizes))
			continue
		}
		for j, r := range tab.rows {
			if r["check"] != "OK" {
				t.Errorf("%s size %s: check %q", collectives[i], r["bytes"], r["check"])
			}
			if r["bytes"] != strconv.Itoa(sizes[j]) || r["count"] != strconv.Itoa(sizes[j]/4) {
				t.Errorf("%s row %d: bytes %s count %s, want %d", collectives[i], j, r["bytes"], r["count"], sizes[j])
			}
			avg, err1 := strconv.ParseFloat(r["avg_us"], 64)
			bus, err2 := strconv.ParseFloat(r["busbw_GBps"], 64)
			if err1 != nil || err2 != nil || avg <= 0 || bus < 0 {
				t.Errorf("%s row %d: avg_us %q busbw %q", collectives[i], j, r["avg_us"], r["busbw_GBps"])
			}
			skew, err1 := strconv.ParseFloat(r["skew_us"], 64)
			late, err2 := strconv.Atoi(r["late_rank"])
			if err1 != nil || err2 != nil || !(skew >= 0) || late < -1 || late >= p {
				t.Errorf("%s row %d: skew_us %q late_rank %q", collectives[i], j, r["skew_us"], r["late_rank"])
			}
		}
	}
}

func TestBenchMemTransport(t *testing.T) {
	// MIN_BYTES/MAX_BYTES/STEP are what shared/peers/run_all.sh exports.
	t.Setenv("MIN_BYTES", "4096")
	t.Setenv("MAX_BYTES", "65536")
	t.Setenv("STEP", "4")
	json := filepath.Join(t.TempDir(), "out.json")
	code, out, stderr := runCLI(t, "bench", "--transport", "mem", "--np", "3", "--collective", "all",
		"-n", "2", "-w", "1", "-c", "1", "--format", "tsv", "-J", json)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkAllOK(t, parseTSV(t, out), 3, []string{"ring", "butterfly", "binary-blocks", "ps"}, []int{4096, 16384, 65536})
	checkJSON(t, json, 4, 3)
}

func checkJSON(t *testing.T, path string, tables, rows int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			P    int  `json:"p"`
			OK   bool `json:"ok"`
			Rows []struct {
				Bytes int64 `json:"bytes"`
			} `json:"rows"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("-J output: %v", err)
	}
	if len(doc.Results) != tables {
		t.Fatalf("-J: %d results, want %d", len(doc.Results), tables)
	}
	for _, r := range doc.Results {
		if !r.OK || len(r.Rows) != rows {
			t.Errorf("-J result ok=%v with %d rows, want ok with %d", r.OK, len(r.Rows), rows)
		}
	}
}

func TestBenchMemTextAllOps(t *testing.T) {
	for _, op := range []string{"allreduce", "reducescatter", "allgather", "broadcast", "alltoall"} {
		t.Run(op, func(t *testing.T) {
			code, out, stderr := runCLI(t, "bench", "--transport", "mem", "--np", "4", "--collective", "ring,ps",
				"--op", op, "-b", "8", "-e", "8K", "-f", "32", "-n", "1", "-w", "0", "-c", "2", "-r", "3")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if n := strings.Count(out, "# Out of bounds values : 0 OK\n"); n != 2 {
				t.Errorf("%d clean trailers, want 2:\n%s", n, out)
			}
			if !strings.Contains(out, "op="+op) {
				t.Errorf("header does not name op %s:\n%s", op, out)
			}
		})
	}
}

// The tests below run the built binary: over libp2p, through the launcher, with signals.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func hetsyncBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hetsync-cmd-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "hetsync")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/hetsync").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hetsyncBinary(t), args...)
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hetsync %v did not finish: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errb.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func TestBenchP2PEndToEnd(t *testing.T) {
	code, out, stderr := runBinary(t, "bench", "-np", "4", "--collective", "all", "-b", "4K", "-e", "64K", "-f", "4",
		"-n", "3", "-w", "1", "-c", "1", "--format", "tsv")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	checkAllOK(t, parseTSV(t, out), 4, []string{"ring", "butterfly", "binary-blocks", "ps"}, []int{4096, 16384, 65536})
}

// The settling phase of auto at 64 ranks launched as processes, as the sweep
// `hetsync bench -np 64 --collective auto -b 4K -e 64K` runs it: every rank joins before any
// starts, every rank calls the same collectives, and every check is right. (In-process, the
// same path is bench's TestSettleAt64Ranks.)
func TestBenchSettlesAt64Ranks(t *testing.T) {
	code, out, stderr := runBinary(t, "bench", "-np", "64", "--collective", "auto", "-b", "4K", "-e", "64K", "-f", "4",
		"-n", "1", "-w", "1", "-c", "1", "--settle", "100ms", "--format", "tsv", "--security", "none", "--data-path", "tcp")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	checkAllOK(t, parseTSV(t, out), 64, []string{"auto"}, []int{4096, 16384, 65536})
}

func TestLaunchFailureNamesTheRank(t *testing.T) {
	code, out, stderr := runBinary(t, "launch", "-np", "3", "--", "sh", "-c",
		`echo "up $HETSYNC_RANK/$HETSYNC_WORLD_SIZE"; if [ "$HETSYNC_RANK" = 1 ]; then exit 3; fi; exec sleep 600`)
	if code != 3 {
		t.Errorf("exit status %d, want 3 (rank 1's)", code)
	}
	if !strings.Contains(stderr, "hetsync: rank 1 failed first: exit status 3") {
		t.Errorf("stderr does not name rank 1 and its status:\n%s", stderr)
	}
	if !strings.Contains(out, "[1] up 1/3\n") {
		t.Errorf("rank 1's output missing or unprefixed:\n%s", out)
	}
}

func TestBenchRankFailureNamesTheRank(t *testing.T) {
	// Every rank refuses to run: the launcher stops the job and names the first to exit.
	code, _, stderr := runBinary(t, "launch", "-np", "2", "--", hetsyncBinary(t), "bench", "--np", "3", "--transport", "p2p")
	if code != 2 {
		t.Errorf("exit status %d, want 2 (the ranks' usage error)", code)
	}
	if !regexp.MustCompile(`(?m)^hetsync: rank [01] failed first: exit status 2`).MatchString(stderr) {
		t.Errorf("no one-line summary naming the rank:\n%s", stderr)
	}
	if !strings.Contains(stderr, "--np 3 but the launcher started 2 ranks") {
		t.Errorf("the rank's own error is missing:\n%s", stderr)
	}
}

// A job stopped by --timeout exits 124, as timeout(1) does, from launch and from a command
// that launches its own ranks.
func TestTimeoutExits124(t *testing.T) {
	for _, args := range [][]string{
		{"launch", "-np", "2", "--timeout", "1s", "--", "sleep", "600"},
		{"bench", "-np", "2", "-b", "4K", "-e", "4K", "-n", "100000000", "--timeout", "1s"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, _, stderr := runBinary(t, args...)
			if code != 124 || !strings.Contains(stderr, "job ran longer than --timeout 1s") {
				t.Errorf("exit status %d, want 124 and the timeout named:\n%s", code, stderr)
			}
		})
	}
}

// --grace 0 kills the ranks at once: a rank that ignores SIGTERM does not hold the launcher
// for the default grace period.
func TestLaunchGraceZeroKillsAtOnce(t *testing.T) {
	code, _, stderr := runBinary(t, "launch", "-np", "2", "--grace", "0", "--timeout", "1s", "--", "sh", "-c", `trap "" TERM; sleep 600`)
	if code != 124 || strings.Contains(stderr, "after SIGTERM") {
		t.Errorf("exit status %d, want 124 and no SIGTERM grace:\n%s", code, stderr)
	}
}

func TestLaunchSIGTERMStopsEveryRank(t *testing.T) {
	cmd := exec.Command(hetsyncBinary(t), "launch", "-np", "3", "--grace", "1s", "--", "sh", "-c", `echo "pid $$"; exec sleep 600`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var pids []int
	for len(pids) < 3 && sc.Scan() {
		if m := regexp.MustCompile(`^\[\d\] pid (\d+)$`).FindStringSubmatch(sc.Text()); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
		}
	}
	if len(pids) != 3 {
		t.Fatalf("got %d rank pids; stderr:\n%s", len(pids), errb.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit status %d, want 130", code)
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("stderr does not say the job was interrupted:\n%s", errb.String())
	}
	for _, pid := range pids {
		// The launcher reaped its ranks, so they no longer exist at all.
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("rank process %d still exists after the launcher exited (kill 0: %v)", pid, err)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A malformed job setting in the environment is a usage error naming the variable.
func TestSettingVariableErrors(t *testing.T) {
	for _, args := range [][]string{{"bench", "--np", "2"}, {"launch", "--np", "2", "true"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Setenv("HETSYNC_POLL", "soon")
			code, _, stderr := runCLI(t, args...)
			if code != 2 || !strings.Contains(stderr, `HETSYNC_POLL="soon"`) {
				t.Errorf("exit %d, stderr %q; want exit 2 naming HETSYNC_POLL", code, stderr)
			}
		})
	}
}

// bench started by hetsync launch runs with the security and data path of launch's flags.
func TestBenchUnderLaunchTakesTheJobSettings(t *testing.T) {
	bin := hetsyncBinary(t)
	code, out, stderr := runBinary(t, "launch", "-np", "2", "--security", "none", "--data-path", "tcp", "--",
		bin, "bench", "-b", "4K", "-e", "4K", "-n", "1", "-w", "1", "--settle", "0")
	if code != 0 || !strings.Contains(out, "transport=p2p data-path=tcp security=none") {
		t.Fatalf("exit %d; want rank 0's table to note data-path=tcp security=none\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// The data paths are one list (hetsync.DataPaths): --data-path accepts each of them on bench,
// train and launch, its help names each, the launcher carries each to the ranks, and the
// README's flag summary lists exactly them.
func TestDataPathsOneList(t *testing.T) {
	var usage string
	for _, f := range netFlags(0) {
		if f.Names()[0] == "data-path" {
			usage = f.(*cli.StringFlag).Usage
		}
	}
	for _, name := range hetsync.DataPaths() {
		t.Run(name, func(t *testing.T) {
			n := netOptions{Transport: "p2p", DataPath: name, Security: "tls"}
			if err := n.validate(); err != nil {
				t.Errorf("--data-path %s refused: %v", name, err)
			}
			if !strings.Contains(usage, name) {
				t.Errorf("--data-path's help does not name %s: %q", name, usage)
			}
			s, err := launcher.SettingsFromEnviron(func(k string) string {
				for _, kv := range n.settings().Environ() {
					if v, ok := strings.CutPrefix(kv, k+"="); ok {
						return v
					}
				}
				return ""
			})
			if err != nil || s.DataPath != name {
				t.Errorf("the launcher carries --data-path %s as %q (%v)", name, s.DataPath, err)
			}
		})
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "`--data-path " + strings.Join(hetsync.DataPaths(), "|") + "`"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not list the data paths as %s", want)
	}
}
