package hetsync_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/internal/freeport"
	"github.com/hetsync/hetsync/transport"
)

// sumCheck allreduces a vector of n elements whose element i is rank*n+i on every rank and
// checks the sum.
func sumCheck(ctx context.Context, c *hetsync.Comm, n int) error {
	p, r := c.Size(), c.Rank()
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(r*n + i)
	}
	if err := c.AllReduce(ctx, hetsync.F64(x), hetsync.Sum); err != nil {
		return err
	}
	for i, got := range x {
		// Σ_r (r*n + i) = n*p(p-1)/2 + p*i
		if want := float64(n*p*(p-1)/2 + p*i); got != want {
			return fmt.Errorf("rank %d of %d: element %d = %v, want %v", r, p, i, got, want)
		}
	}
	return nil
}

func TestInitLocal(t *testing.T) {
	for p := 1; p <= 9; p++ {
		for _, alg := range []string{"ring", "butterfly", "binary-blocks", "ps", "auto"} {
			t.Run(fmt.Sprintf("p%d-%s", p, alg), func(t *testing.T) {
				var mu sync.Mutex
				seen := map[int]bool{}
				err := hetsync.InitLocal(context.Background(), p, func(ctx context.Context, c *hetsync.Comm) error {
					if c.Size() != p || c.LocalRank() != c.Rank() || c.LocalSize() != p {
						return fmt.Errorf("rank %d: size %d, local rank %d of %d; want size %d, local = rank of %d",
							c.Rank(), c.Size(), c.LocalRank(), c.LocalSize(), p, p)
					}
					if s := c.Settings(); s.Transport != "mem" || s.Algorithm != alg {
						return fmt.Errorf("rank %d: settings %v, want mem and %s", c.Rank(), s, alg)
					}
					mu.Lock()
					seen[c.Rank()] = true
					mu.Unlock()
					for _, n := range []int{0, 1, p - 1, 7, 1031} {
						if err := sumCheck(ctx, c, n); err != nil {
							return err
						}
					}
					return nil
				}, hetsync.WithAlgorithm(alg))
				if err != nil {
					t.Fatal(err)
				}
				if len(seen) != p {
					t.Errorf("ranks seen: %v, want 0..%d", seen, p-1)
				}
			})
		}
	}
}

// A failing rank's error is InitLocal's, and the ranks waiting for it are released.
func TestInitLocalFirstFailureWins(t *testing.T) {
	boom := errors.New("rank 2 gives up")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := hetsync.InitLocal(ctx, 5, func(ctx context.Context, c *hetsync.Comm) error {
		if c.Rank() == 2 {
			return boom
		}
		return c.Barrier(ctx) // never completes without rank 2
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InitLocal = %v, want %v", err, boom)
	}
	if ctx.Err() != nil {
		t.Fatal("the waiting ranks were not released")
	}
}

func TestInitLocalErrors(t *testing.T) {
	ok := func(context.Context, *hetsync.Comm) error { return nil }
	tests := []struct {
		name string
		n    int
		fn   func(context.Context, *hetsync.Comm) error
		opts []hetsync.Option
		want string
	}{
		{"no ranks", 0, ok, nil, "0 ranks: need at least 1"},
		{"nil function", 2, nil, nil, "nil rank function"},
		{"unknown algorithm", 2, ok, []hetsync.Option{hetsync.WithAlgorithm("tree")}, `WithAlgorithm("tree")`},
		{"unknown algorithm from the launcher", 2, ok, []hetsync.Option{envOf(map[string]string{"HETSYNC_COLLECTIVE": "tree"})}, "HETSYNC_COLLECTIVE"},
		{"bad poll variable", 2, ok, []hetsync.Option{envOf(map[string]string{"HETSYNC_POLL": "soon"})}, `HETSYNC_POLL="soon"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := hetsync.InitLocal(context.Background(), tc.n, tc.fn, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func envOf(m map[string]string) hetsync.Option {
	return hetsync.WithEnv(func(k string) string { return m[k] })
}

func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	return port
}

const testSecret = "5ec2e75ec2e75ec2e75ec2e75ec2e75e"

// launchers give rank r of p the variables each launcher sets (and what a user adds beside
// them: the job secret, the rendezvous, a Kubernetes Job's size).
var launchers = []struct {
	name string
	env  func(r, p int, port string) map[string]string
}{
	{"hetsync launch", func(r, p int, port string) map[string]string {
		return map[string]string{"HETSYNC_RANK": strconv.Itoa(r), "HETSYNC_WORLD_SIZE": strconv.Itoa(p),
			"HETSYNC_LOCAL_RANK": strconv.Itoa(r), "HETSYNC_LOCAL_SIZE": strconv.Itoa(p),
			"HETSYNC_RENDEZVOUS": "127.0.0.1:" + port, "HETSYNC_JOB_SECRET": testSecret}
	}},
	{"mpirun", func(r, p int, port string) map[string]string {
		return map[string]string{"OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": strconv.Itoa(p),
			"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE": strconv.Itoa(p),
			"HETSYNC_RENDEZVOUS": "127.0.0.1:" + port, "HETSYNC_JOB_SECRET": testSecret}
	}},
	{"torchrun", func(r, p int, port string) map[string]string {
		return map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(p), "LOCAL_RANK": strconv.Itoa(r),
			"LOCAL_WORLD_SIZE": strconv.Itoa(p), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "HETSYNC_JOB_SECRET": testSecret}
	}},
	{"srun", func(r, p int, port string) map[string]string {
		return map[string]string{"SLURM_PROCID": strconv.Itoa(r), "SLURM_NTASKS": strconv.Itoa(p), "SLURM_LOCALID": strconv.Itoa(r),
			"SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": strconv.Itoa(p),
			"HETSYNC_RENDEZVOUS": "127.0.0.1:" + port, "HETSYNC_JOB_SECRET": testSecret}
	}},
	{"kubernetes indexed job", func(r, p int, port string) map[string]string {
		return map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(r), "HETSYNC_WORLD_SIZE": strconv.Itoa(p),
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "HETSYNC_JOB_SECRET": testSecret}
	}},
}

// initJob runs p ranks of Init as goroutines, rank r with env(r), each running fn.
func initJob(t *testing.T, p int, env func(r int) map[string]string, fn func(ctx context.Context, c *hetsync.Comm) error, opts ...hetsync.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := hetsync.Init(ctx, append([]hetsync.Option{envOf(env(r))}, opts...)...)
			if err != nil {
				errs[r] = err
				cancel()
				return
			}
			errs[r] = fn(ctx, c)
			if cerr := c.Close(); errs[r] == nil {
				errs[r] = cerr
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Every launcher's variables form the job, and the job's settings come from the launcher's
// HETSYNC_* variables unless an option says otherwise.
func TestInitUnderEachLauncher(t *testing.T) {
	for _, l := range launchers {
		for _, p := range []int{1, 3, 4} {
			t.Run(fmt.Sprintf("%s/p%d", l.name, p), func(t *testing.T) {
				port := freePort(t)
				env := func(r int) map[string]string {
					m := l.env(r, p, port)
					m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"], m["HETSYNC_COLLECTIVE"] = "none", "tcp", "butterfly"
					return m
				}
				initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
					want := hetsync.Settings{Transport: "p2p", Algorithm: "butterfly", Security: "none", DataPath: "tcp", JoinTimeout: time.Minute,
						Sched: ownSched(t)}
					if got := c.Settings(); got != want {
						return fmt.Errorf("rank %d: settings %+v, want %+v", c.Rank(), got, want)
					}
					wantLocal, wantLocalSize := c.Rank(), p
					if l.name == "kubernetes indexed job" {
						wantLocal, wantLocalSize = 0, 1
					}
					if c.Size() != p || c.LocalRank() != wantLocal || c.LocalSize() != wantLocalSize {
						return fmt.Errorf("rank %d: size %d, local rank %d of %d", c.Rank(), c.Size(), c.LocalRank(), c.LocalSize())
					}
					return sumCheck(ctx, c, 13)
				})
			})
		}
	}
}

// A one-host job over shared memory forms with an arena unless WithArena or HETSYNC_ARENA
// turns it off (the option winning), and its settings say which.
func TestInitArena(t *testing.T) {
	cases := []struct {
		name string
		env  string // HETSYNC_ARENA
		opts []hetsync.Option
		want bool
	}{
		{"default", "", nil, true},
		{"option off", "", []hetsync.Option{hetsync.WithArena(false)}, false},
		{"variable off", "off", nil, false},
		{"variable on", "on", nil, true},
		{"option on over variable off", "off", []hetsync.Option{hetsync.WithArena(true)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const p = 3
			port := freePort(t)
			env := func(r int) map[string]string {
				m := launchers[0].env(r, p, port)
				m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"], m["HETSYNC_ARENA"] = "none", "shm", tc.env
				return m
			}
			initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
				s := c.Settings()
				if s.Arena != tc.want || (transport.HostArena(c.Endpoint()) != nil) != tc.want {
					return fmt.Errorf("rank %d: settings say arena %v, the endpoint has one: %v; want %v",
						c.Rank(), s.Arena, transport.HostArena(c.Endpoint()) != nil, tc.want)
				}
				if strings.HasSuffix(s.String(), " arena=on") != tc.want {
					return fmt.Errorf("rank %d: settings %q, want arena=on at the end: %v", c.Rank(), s, tc.want)
				}
				return sumCheck(ctx, c, 7)
			}, tc.opts...)
		})
	}
}

func TestInitOptionsWinOverTheLauncher(t *testing.T) {
	const p = 3
	port := freePort(t)
	env := func(r int) map[string]string {
		m := launchers[0].env(r, p, port)
		m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"], m["HETSYNC_COLLECTIVE"], m["HETSYNC_JOIN_TIMEOUT"] = "none", "tcp", "butterfly", "90s"
		m["HETSYNC_SCHED"] = "fifo" // not a policy: the option must win before it is read
		return m
	}
	initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
		want := hetsync.Settings{Transport: "p2p", Algorithm: "ring", Security: "tls", DataPath: "stream", JoinTimeout: 90 * time.Second, Checksum: true,
			Sched: ownSched(t)}
		if got := c.Settings(); got != want {
			return fmt.Errorf("rank %d: settings %+v, want %+v", c.Rank(), got, want)
		}
		return sumCheck(ctx, c, 5)
	}, hetsync.WithAlgorithm("ring"), hetsync.WithSecurity("tls"), hetsync.WithDataPath("stream"), hetsync.WithChecksum(true),
		hetsync.WithSched("inherit"))
}

func TestInitErrors(t *testing.T) {
	port := "29999"
	good := launchers[0].env(1, 2, port)
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	mpirunNoSecret := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
	tests := []struct {
		name string
		env  map[string]string
		opts []hetsync.Option
		want []string
	}{
		{"unknown security", with(good, "HETSYNC_SECURITY", "ssl"), nil, []string{"HETSYNC_SECURITY", `"ssl"`}},
		{"unknown data path option", good, []hetsync.Option{hetsync.WithDataPath("rdma")}, []string{`WithDataPath("rdma")`, "rank 1"}},
		{"unknown algorithm", with(good, "HETSYNC_COLLECTIVE", "tree"), nil, []string{"HETSYNC_COLLECTIVE", "rank 1", "tree"}},
		{"bad join timeout", with(good, "HETSYNC_JOIN_TIMEOUT", "forever"), nil, []string{`HETSYNC_JOIN_TIMEOUT="forever"`}},
		{"bad checksum", with(good, "HETSYNC_CHECKSUM", "maybe"), nil, []string{`HETSYNC_CHECKSUM="maybe"`}},
		{"bad arena", with(good, "HETSYNC_ARENA", "maybe"), nil, []string{"HETSYNC_ARENA", `"maybe"`, "rank 1", "on or off"}},
		{"bad re-plan settings", with(good, "HETSYNC_REPLAN", "calls=-2"), nil, []string{"HETSYNC_REPLAN", "rank 1", "calls=-2"}},
		{"negative join timeout", good, []hetsync.Option{hetsync.WithJoinTimeout(-time.Second)}, []string{"WithJoinTimeout(-1s)", "negative"}},
		{"rank out of range", with(good, "HETSYNC_RANK", "2"), nil, []string{"HETSYNC_RANK=2"}},
		{"mpirun without a secret", mpirunNoSecret, nil, []string{"Open MPI", "one of 4 ranks", "HETSYNC_JOB_SECRET"}},
		{"kubernetes without a size", map[string]string{"JOB_COMPLETION_INDEX": "0", "HETSYNC_JOB_SECRET": testSecret, "MASTER_ADDR": "a", "MASTER_PORT": "1"},
			nil, []string{"Kubernetes", "HETSYNC_WORLD_SIZE is missing"}},
		{"torchrun without a rendezvous", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "HETSYNC_JOB_SECRET": testSecret},
			nil, []string{"torchrun", "MASTER_ADDR"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			initFails(t, append([]hetsync.Option{envOf(tc.env)}, tc.opts...), tc.want)
		})
	}
}

// initFails checks that Init with opts fails with an error naming every string of want.
func initFails(t *testing.T, opts []hetsync.Option, want []string) {
	t.Helper()
	c, err := hetsync.Init(context.Background(), opts...)
	if err == nil {
		c.Close()
		t.Fatal("Init succeeded")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

// Rank 0 alone cannot form a job of 2: Init gives up after the join timeout, naming the rank.
func TestInitJoinTimeout(t *testing.T) {
	env := launchers[0].env(0, 2, freePort(t))
	c, err := hetsync.Init(context.Background(), envOf(env), hetsync.WithJoinTimeout(time.Second))
	if err == nil {
		c.Close()
		t.Fatal("Init succeeded without rank 1")
	}
	// The join timeout, not the test's clock, ended the wait: the error says so.
	if !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "still missing rank(s) 1") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Init without rank 1: %v; want rank 0's join timeout naming rank 1", err)
	}
}

func TestCloseTwice(t *testing.T) {
	c, err := hetsync.Init(context.Background(), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestFirstCollectiveMismatchAfterInit: three ranks of one host over shared memory (the arena
// path) join, and rank 0's first collective differs from the others'. Init succeeds on every
// rank, and every rank's error is that collective's, naming both calls, never Init's barrier.
// A few jobs: the rank that is still waking from Init's barrier when the others mismatch is up
// to the scheduler.
func TestFirstCollectiveMismatchAfterInit(t *testing.T) {
	const p = 3
	for range 4 {
		initJob(t, p, shmEnv(t, p), func(ctx context.Context, c *hetsync.Comm) error {
			x := hetsync.F32(make([]float32, 64))
			var err error
			if c.Rank() == 0 {
				err = c.AllReduce(ctx, x, hetsync.Sum)
			} else {
				err = c.Broadcast(ctx, x, 0)
			}
			if err == nil || !strings.Contains(err.Error(), "AllReduce(float, 64, sum)") ||
				!strings.Contains(err.Error(), "Broadcast(float, 64, root 0)") {
				return fmt.Errorf("rank %d: first collective: %v, want the mismatch of AllReduce and Broadcast", c.Rank(), err)
			}
			return nil
		})
	}
}

// shmEnv is the environment of rank r of a p-rank job that hetsync's launcher starts on one
// host, over shared memory without security: the arena path.
func shmEnv(t *testing.T, p int) func(r int) map[string]string {
	port := freePort(t)
	return func(r int) map[string]string {
		m := launchers[0].env(r, p, port)
		m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"] = "none", "shm"
		return m
	}
}
