package hetsync_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/ranktest"
)

// The programs the end-to-end tests run, built once per test binary into a temporary
// directory: the hetsync command, examples/hello and examples/subcomm.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (hetsyncBin, helloBin string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "hetsync-e2e-"); buildErr != nil {
			return
		}
		for _, pkg := range []string{"./cmd/hetsync", "./examples/hello", "./examples/subcomm"} {
			out, err := exec.Command("go", "build", "-o", binDir, pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "hetsync"), filepath.Join(binDir, "hello")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// subcommBin is examples/subcomm, built with the others.
func subcommBin(t *testing.T) string {
	t.Helper()
	binaries(t)
	return filepath.Join(binDir, "subcomm")
}

// helloLine is what examples/hello prints, after any "[rank] " prefix of the launcher.
var helloLine = regexp.MustCompile(`rank (\d+) of (\d+) \(local rank (\d+)\): sum (\S+), (.*)$`)

// checkHello checks that out has one line from each of p ranks with the sum 1+...+p and the
// settings want.
func checkHello(t *testing.T, out string, p int, want string) {
	t.Helper()
	var ranks []int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := helloLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		ranks = append(ranks, r)
		if m[2] != strconv.Itoa(p) || m[4] != strconv.Itoa(p*(p+1)/2) || m[5] != want {
			t.Errorf("rank %s: %q; want size %d, sum %d, settings %q", m[1], line, p, p*(p+1)/2, want)
		}
	}
	checkEveryRankPrinted(t, ranks, p, out)
}

// checkEveryRankPrinted checks that ranks, the ranks whose lines out has, are 0..p-1 once each.
func checkEveryRankPrinted(t *testing.T, ranks []int, p int, out string) {
	t.Helper()
	sort.Ints(ranks)
	if fmt.Sprint(ranks) != fmt.Sprint(seq(p)) {
		t.Errorf("ranks that printed: %v, want %v\noutput:\n%s", ranks, seq(p), out)
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// run runs argv with the extra environment and returns its combined output.
func run(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(cleanEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out.String())
	}
	return out.String()
}

// cleanEnv is this process's environment without any launcher's variables, so that the
// programs the tests start see only the job the test gives them.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "HETSYNC_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "PMIX_"):
		case k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" || k == "JOB_COMPLETION_INDEX":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// The hello example under `hetsync launch`: each rank gets the job's security and data path
// from the launcher's flags, or the defaults without them.
func TestHelloUnderLaunch(t *testing.T) {
	hetsyncBin, hello := binaries(t)
	tests := []struct {
		name  string
		np    int
		flags []string
		want  string
	}{
		{"none tcp ring", 4, []string{"--security", "none", "--data-path", "tcp", "--collective", "ring"}, "transport=p2p algorithm=ring security=none data-path=tcp"},
		{"defaults", 4, nil, "transport=p2p algorithm=auto security=tls data-path=auto arena=on"},
		{"stream checksum", 3, []string{"--data-path", "stream", "--checksum", "--collective", "binary-blocks"}, "transport=p2p algorithm=binary-blocks security=tls data-path=stream checksum=crc32c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			argv := append(append([]string{hetsyncBin, "launch", "-np", strconv.Itoa(tc.np)}, tc.flags...), "--", hello)
			checkHello(t, run(t, nil, argv...), tc.np, tc.want)
		})
	}
}

// The hello example alone is a job of one rank over the in-process transport.
func TestHelloAlone(t *testing.T) {
	_, hello := binaries(t)
	checkHello(t, run(t, []string{"HETSYNC_COLLECTIVE=ring"}, hello), 1, "transport=mem algorithm=ring")
}

// Ranks of the hello example started as Slurm's srun, torchrun and a Kubernetes indexed Job
// start them: the launcher's variables set by the test, plus the secret and rendezvous a user
// adds, and the job's security and data path, which each rank reports back.
func TestHelloUnderOtherLaunchers(t *testing.T) {
	_, hello := binaries(t)
	const p = 3
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			port := freePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			outs, err := ranktest.Run(ctx, p, []string{hello}, func(r int) []string {
				env := append(cleanEnv(), "HETSYNC_SECURITY=none", "HETSYNC_DATA_PATH=tcp")
				for k, v := range l.env(r, p, port) {
					env = append(env, k+"="+v)
				}
				return env
			})
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			for _, o := range outs {
				all.WriteString(o)
			}
			checkHello(t, all.String(), p, "transport=p2p algorithm=auto security=none data-path=tcp")
		})
	}
}

// The hello example started by Open MPI's mpirun: Open MPI gives each process its rank, and
// the job secret and rank 0's rendezvous reach every rank through mpirun -x, as a user would
// pass them.
func TestHelloUnderMpirun(t *testing.T) {
	_, hello := binaries(t)
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatalf("mpirun (Debian's openmpi-bin) is needed: run make test-deps: %v", err)
	}
	const p = 4
	argv := []string{mpirun, "-np", strconv.Itoa(p), "--oversubscribe"}
	if os.Geteuid() == 0 {
		argv = append(argv, "--allow-run-as-root")
	}
	argv = append(argv, "-x", "HETSYNC_JOB_SECRET="+testSecret, "-x", "HETSYNC_RENDEZVOUS=127.0.0.1:"+freePort(t),
		"-x", "HETSYNC_SECURITY=none", "-x", "HETSYNC_DATA_PATH=tcp", "-x", "HETSYNC_COLLECTIVE=butterfly", hello)
	checkHello(t, run(t, nil, argv...), p, "transport=p2p algorithm=butterfly security=none data-path=tcp")
}

// subcommLine is what examples/subcomm prints, after any "[rank] " prefix of the launcher.
var subcommLine = regexp.MustCompile(`rank (\d+) of (\d+) \(local rank (\d+) of (\d+)\): sum (.*)$`)

// checkSubcomm checks that out has one line from each rank of hosts (hosts[r] is rank r's
// host), each with its local rank on that host and the job's sum, size and host count.
func checkSubcomm(t *testing.T, out string, hosts []string) {
	t.Helper()
	p := len(hosts)
	distinct := map[string]bool{}
	for _, h := range hosts {
		distinct[h] = true
	}
	var ranks []int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := subcommLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r, err := strconv.Atoi(m[1])
		if err != nil || r >= p {
			t.Errorf("line %q: no rank of %d", line, p)
			continue
		}
		ranks = append(ranks, r)
		local, size := placeAmong(p, r, func(q int) bool { return hosts[q] == hosts[r] })
		want := []string{strconv.Itoa(p), strconv.Itoa(local), strconv.Itoa(size),
			fmt.Sprintf("%d over %d ranks on %d hosts", p*(p+1)/2, p, len(distinct))}
		if got := m[2:]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rank %d: %q; want size, local rank, local size and sum %q", r, line, want)
		}
	}
	checkEveryRankPrinted(t, ranks, p, out)
}

// The subcomm example under `hetsync launch -np 4`: the four ranks share this host, so their
// host's leader alone forms the communicator across hosts.
func TestSubcommUnderLaunch(t *testing.T) {
	hetsyncBin, _ := binaries(t)
	out := run(t, nil, hetsyncBin, "launch", "-np", "4", "--security", "none", "--data-path", "tcp", "--", subcommBin(t))
	checkSubcomm(t, out, []string{"h", "h", "h", "h"})
}

// The subcomm example on three hosts, parted by HETSYNC_HOSTNAME: each host reduces to its
// leader, the three leaders allreduce, and every rank prints the job's sum.
func TestSubcommAcrossHosts(t *testing.T) {
	hosts := []string{"a", "b", "a", "c", "b", "a"}
	p := len(hosts)
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs, err := ranktest.Run(ctx, p, []string{subcommBin(t)}, func(r int) []string {
		env := append(cleanEnv(), "HETSYNC_SECURITY=none", "HETSYNC_DATA_PATH=tcp", "HETSYNC_HOSTNAME="+hosts[r])
		for k, v := range launchers[0].env(r, p, port) {
			env = append(env, k+"="+v)
		}
		return env
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSubcomm(t, strings.Join(outs, ""), hosts)
}
