package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/internal/freeport"
)

// Job describes the ranks to start on this machine and how to supervise them.
type Job struct {
	// NP is the number of ranks.
	NP int
	// Command is the program and its arguments, run once per rank.
	Command []string
	// Env is the base environment of every rank (usually os.Environ()); the rank variables are
	// added to it, replacing any inherited HETSYNC_* and RANK/WORLD_SIZE/LOCAL_* values.
	Env []string
	// Dir is the ranks' working directory; empty means the launcher's.
	Dir string
	// Stdout and Stderr receive the ranks' output, one whole line at a time, each line
	// prefixed "[rank] ". Nil discards.
	Stdout, Stderr io.Writer
	// Log receives the launcher's own messages (which rank failed, stopping ranks). Nil
	// discards.
	Log io.Writer
	// UnprefixedRank0 passes rank 0's output through without the "[0] " prefix (used by
	// commands whose rank 0 prints the result, e.g. a benchmark table).
	UnprefixedRank0 bool
	// Rendezvous is host:port for rank 0's rendezvous listener; empty picks a free port on
	// 127.0.0.1.
	Rendezvous string
	// Secret is the job secret (hex); empty generates 32 random bytes.
	Secret string
	// Grace is how long ranks get between SIGTERM and SIGKILL when the job is stopped; 0 means
	// DefaultGrace, unless KillAtOnce.
	Grace time.Duration
	// KillAtOnce stops ranks with SIGKILL straight away, without SIGTERM and a grace period
	// (launch --grace 0). Grace must then be 0.
	KillAtOnce bool
	// Spawner starts the processes; nil means LocalSpawner{}.
	Spawner Spawner

	// Hosts and Placement spread the ranks over several machines (see Place): rank r runs on
	// Hosts[Placement[r].Host] and gets that host's local rank and size and HETSYNC_HOSTNAME.
	// The Spawner must know the same placement (NewSSHSpawner). Nil Placement: every rank on
	// this machine.
	Hosts     []Host
	Placement []Slot
	// Iface is passed to every rank as HETSYNC_IFACE: the rank advertises that interface's
	// address to its peers. Empty: the address that routes to the rendezvous host.
	Iface string
	// Timeout stops the job when it runs longer, with a *TimedOut naming the ranks still
	// running; 0 means no limit.
	Timeout time.Duration
	// OutputDir, when set, also receives each rank's output unprefixed, in rank.N.log.
	OutputDir string
	// Timestamps prefixes every line of output with the time it reached the launcher.
	Timestamps bool
	// Settings are passed to every rank (HETSYNC_SECURITY, HETSYNC_DATA_PATH, ...), replacing
	// inherited values of the fields that are set.
	Settings Settings
}

// Validate checks the job description.
func (j *Job) Validate() error {
	if j.NP < 1 {
		return fmt.Errorf("-np %d: need at least 1 rank", j.NP)
	}
	if len(j.Command) == 0 || j.Command[0] == "" {
		return errors.New("no command to launch (usage: hetsync launch -np N [--] COMMAND ARGS...)")
	}
	if j.Grace < 0 {
		return fmt.Errorf("grace period %v is negative", j.Grace)
	}
	if j.KillAtOnce && j.Grace != 0 {
		return fmt.Errorf("grace period %v given with KillAtOnce (no grace): choose one", j.Grace)
	}
	if j.Secret != "" {
		if err := CheckSecret("job secret", j.Secret); err != nil {
			return err
		}
	}
	if j.Rendezvous != "" {
		host, port, err := net.SplitHostPort(j.Rendezvous)
		if err != nil {
			return fmt.Errorf("--rendezvous %q: want host:port: %v", j.Rendezvous, err)
		}
		if p, err := strconv.Atoi(port); host == "" || err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("--rendezvous %q: want host:port with a host and a port in [1, 65535]", j.Rendezvous)
		}
	}
	if j.Timeout < 0 {
		return fmt.Errorf("--timeout %v is negative", j.Timeout)
	}
	return j.validatePlacement()
}

// DefaultGrace is how long ranks get between SIGTERM and SIGKILL when Job.Grace is 0.
const DefaultGrace = 3 * time.Second

// RankFailure is the error of a job in which a rank failed: the first rank to fail, and how,
// and what the launcher saw of the other ranks that may be the cause: the first rank to fail
// is often the first to notice that a peer left or froze.
type RankFailure struct {
	Rank int
	// Host is the rank's host in a multi-host job, else empty.
	Host string
	Exit Exit
	// Stopped is how many other ranks were still running and had to be stopped.
	Stopped int
	// Left are the ranks that had exited with status 0 before Rank failed, while others were
	// still in the job, in the order they exited.
	Left []Departure
	// Frozen are the ranks found stopped (SIGSTOP, a tracer) when Rank failed: they run no
	// code, so their peers hear nothing from them. Only ranks on this machine are checked.
	Frozen []int
	// Started is when the job started.
	Started time.Time
}

// Departure is a rank that exited with status 0 while other ranks were still running.
type Departure struct {
	Rank int
	// Host is the rank's host in a multi-host job, else empty.
	Host string
	At   time.Time
}

func (f *RankFailure) Error() string {
	return f.cause() + f.failed()
}

// cause is what the launcher saw of the other ranks before Rank failed ("" when nothing), as
// a prefix of the failure.
func (f *RankFailure) cause() string {
	var b strings.Builder
	if len(f.Frozen) > 0 {
		fmt.Fprintf(&b, "rank(s) %s stopped (SIGSTOP or a tracer), so their peers hear nothing from them; ", joinInts(f.Frozen))
	}
	for _, d := range f.Left {
		on := ""
		if d.Host != "" {
			on = " on host " + d.Host
		}
		fmt.Fprintf(&b, "rank %d%s exited with status 0 at %s (%v into the job) while the other ranks were still in it; ",
			d.Rank, on, d.At.Format("15:04:05.000"), d.At.Sub(f.Started).Round(time.Millisecond))
	}
	return b.String()
}

// failed is the first failure itself.
func (f *RankFailure) failed() string {
	s := fmt.Sprintf("rank %d failed first: %v", f.Rank, f.Exit)
	if f.Host != "" {
		s = fmt.Sprintf("rank %d on host %s failed first: %v", f.Rank, f.Host, f.Exit)
	}
	if f.Stopped > 0 {
		s += fmt.Sprintf("; stopped the other %d running rank(s)", f.Stopped)
	}
	return s
}

// Interrupted is the error of a job stopped because its context was cancelled (Ctrl-C, SIGTERM
// to the launcher).
type Interrupted struct {
	Cause   error
	Stopped int
}

func (e *Interrupted) Error() string {
	return fmt.Sprintf("interrupted (%v): stopped %d running rank(s)", e.Cause, e.Stopped)
}

func (e *Interrupted) Unwrap() error { return e.Cause }

// TimedOut is the error of a job stopped because it ran longer than Job.Timeout.
type TimedOut struct {
	Timeout time.Duration
	// Running are the ranks that were still running, and Hosts their hosts ("" on this
	// machine).
	Running []int
	Hosts   []string
}

// joinInts formats ranks for messages: "1, 3".
func joinInts(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

func (e *TimedOut) Error() string {
	parts := make([]string, len(e.Running))
	for i, r := range e.Running {
		parts[i] = strconv.Itoa(r)
		if e.Hosts[i] != "" {
			parts[i] += " (" + e.Hosts[i] + ")"
		}
	}
	return fmt.Sprintf("job ran longer than --timeout %v; %d rank(s) still running: %s", e.Timeout, len(e.Running), strings.Join(parts, ", "))
}

// FreeLocalAddr returns 127.0.0.1:PORT with a port that was free a moment ago and that no
// rank's own listener can take before rank 0 binds it (internal/freeport).
func FreeLocalAddr() (string, error) {
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return "", fmt.Errorf("finding a free port for the rendezvous: %w", err)
	}
	return addr, nil
}

// NewSecret returns 32 random bytes in hex.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating the job secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// rankEnviron is base with the rank variables of e, replacing inherited ones (a launcher
// started from inside a rank must not leak its own rank into its children).
func rankEnviron(base []string, e RankEnv) []string {
	vars := e.Environ()
	set := make(map[string]bool, len(vars))
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	env := make([]string, 0, len(base)+len(vars))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

type exitReport struct {
	rank int
	exit Exit
}

// Run starts the ranks and waits for all of them. It returns nil when every rank exited with
// status 0, a *RankFailure naming the first rank that failed, or an *Interrupted when ctx was
// cancelled. Either way no rank is left running when Run returns.
func (j *Job) Run(ctx context.Context) error {
	if err := j.Validate(); err != nil {
		return err
	}
	started := time.Now()
	grace := j.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	spawner := j.Spawner
	if spawner == nil {
		spawner = LocalSpawner{}
	}
	logw := j.Log
	if logw == nil {
		logw = io.Discard
	}
	rdv := j.Rendezvous
	if rdv == "" {
		var err error
		if rdv, err = FreeLocalAddr(); err != nil {
			return err
		}
	}
	secret := j.Secret
	if secret == "" {
		var err error
		if secret, err = NewSecret(); err != nil {
			return err
		}
	}
	stdout, stderr := j.Stdout, j.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if j.Timestamps {
		stdout, stderr = &timestampWriter{w: stdout}, &timestampWriter{w: stderr}
	}
	outLock, errLock := &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	logs, err := openRankLogs(j.OutputDir, j.NP)
	if err != nil {
		return err
	}
	defer logs.close()

	procs := make([]Process, j.NP)
	writers := make([]*prefixWriter, 0, 2*j.NP)
	done := make(chan exitReport, j.NP)
	running := 0
	stopAll := func(sig func(Process) error) {
		for r, p := range procs {
			if p != nil {
				if err := sig(p); err != nil {
					fmt.Fprintf(logw, "hetsync launch: signalling rank %d: %v\n", r, err)
				}
			}
		}
	}

	var failure error
	for r := 0; r < j.NP; r++ {
		if ctx.Err() != nil {
			break // interrupted while starting: the loop below stops the started ranks
		}
		prefix := fmt.Sprintf("[%d] ", r)
		if r == 0 && j.UnprefixedRank0 {
			prefix = ""
		}
		ow, ew := newPrefixWriter(prefix, outLock), newPrefixWriter(prefix, errLock)
		writers = append(writers, ow, ew)
		var rout, rerr io.Writer = ow, ew
		if lw := logs.writer(r); lw != nil {
			writers = append(writers, lw)
			rout, rerr = io.MultiWriter(ow, lw), io.MultiWriter(ew, lw)
		}
		env := j.rankEnv(r, rdv, secret)
		p, err := spawner.Spawn(ctx, ProcSpec{
			Rank: r, Argv: j.Command, Env: rankEnviron(j.Env, env), Dir: j.Dir, Stdout: rout, Stderr: rerr,
		})
		if err != nil {
			failure = fmt.Errorf("starting rank %d of %d%s: %w", r, j.NP, j.onHost(r), err)
			break
		}
		procs[r] = p
		running++
		go func(r int, p Process) {
			e := p.Wait()
			if e.At.IsZero() {
				e.At = time.Now()
			}
			done <- exitReport{r, e}
		}(r, p)
	}

	var killTimer <-chan time.Time
	stopping := false
	stop := func() int {
		if stopping {
			return 0
		}
		stopping = true
		if j.KillAtOnce {
			stopAll(Process.Kill)
			return running
		}
		stopAll(Process.Terminate)
		killTimer = time.After(grace)
		return running
	}
	if failure != nil {
		n := stop()
		if n > 0 {
			fmt.Fprintf(logw, "hetsync launch: %v; stopping %d started rank(s)\n", failure, n)
		}
	}
	ctxDone := ctx.Done()
	var timeoutC <-chan time.Time
	if j.Timeout > 0 {
		t := time.NewTimer(j.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	// left are the ranks that exited with status 0 while others still ran: not a failure by
	// itself, but the likely cause of one that follows (their peers fail waiting for them).
	var left []Departure
	for running > 0 {
		select {
		case rep := <-done:
			running--
			procs[rep.rank] = nil
			if rep.exit.Success() {
				// A report may arrive after the failure it caused: its time decides.
				if f, ok := failure.(*RankFailure); (failure == nil && running > 0) || (ok && rep.exit.At.Before(f.Exit.At)) {
					left = append(left, Departure{Rank: rep.rank, Host: j.hostName(rep.rank), At: rep.exit.At})
				}
			}
			if !rep.exit.Success() && failure == nil {
				f := &RankFailure{Rank: rep.rank, Host: j.hostName(rep.rank), Exit: rep.exit, Stopped: running,
					Left: slices.Clone(left), Frozen: frozen(procs), Started: started}
				failure = f
				if running > 0 {
					fmt.Fprintf(logw, "hetsync launch: %srank %d%s failed: %v; stopping the other %d rank(s)\n",
						f.cause(), rep.rank, j.onHost(rep.rank), rep.exit, running)
				}
				stop()
			}
		case <-ctxDone:
			ctxDone = nil
			if failure == nil {
				failure = &Interrupted{Cause: context.Cause(ctx), Stopped: running}
				fmt.Fprintf(logw, "hetsync launch: interrupted; stopping %d rank(s)\n", running)
			}
			stop()
		case <-timeoutC:
			timeoutC = nil
			if failure == nil {
				t := &TimedOut{Timeout: j.Timeout}
				for r, p := range procs {
					if p != nil {
						t.Running = append(t.Running, r)
						t.Hosts = append(t.Hosts, j.hostName(r))
					}
				}
				failure = t
				fmt.Fprintf(logw, "hetsync launch: %v; stopping them\n", t)
			}
			stop()
		case <-killTimer:
			killTimer = nil
			if running > 0 {
				fmt.Fprintf(logw, "hetsync launch: %d rank(s) still running %v after SIGTERM; sending SIGKILL\n", running, grace)
			}
			stopAll(Process.Kill)
		}
	}
	for _, w := range writers {
		w.Flush()
	}
	if f, ok := failure.(*RankFailure); ok {
		slices.SortFunc(left, func(a, b Departure) int { return a.At.Compare(b.At) })
		f.Left = left
	}
	if failure == nil && len(writers) < 2*j.NP {
		// Cancelled before every rank was started.
		failure = &Interrupted{Cause: context.Cause(ctx)}
	}
	return failure
}

// frozen are the ranks among procs (nil: ended) found stopped.
func frozen(procs []Process) []int {
	var out []int
	for r, p := range procs {
		if f, ok := p.(Freezable); ok && f.Stopped() {
			out = append(out, r)
		}
	}
	return out
}

// ExitCode is the status a launcher process should exit with after Run returned err: 0 for nil,
// the failed rank's status (or 128+signal) for a RankFailure, 130 for an interruption, 124 for a
// timeout, else 1.
func ExitCode(err error) int {
	var f *RankFailure
	var in *Interrupted
	switch {
	case err == nil:
		return 0
	case errors.As(err, &f):
		if c := f.Exit.ExitCode(); c != 0 {
			return c
		}
		return 1
	case errors.As(err, &in):
		return 130
	case errors.As(err, new(*TimedOut)):
		return 124 // as timeout(1)
	default:
		return 1
	}
}
