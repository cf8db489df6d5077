package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/bench"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/internal/schedpolicy"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/metrics/exporter"
	"github.com/hetsync/hetsync/transport"
)

// netOptions says how the ranks of a bench or train job reach each other.
type netOptions struct {
	Transport   string // "p2p" or "mem"
	DataPath    string
	Security    string
	JoinTimeout time.Duration
	// Checksum adds a CRC-32C of every payload to its frame (headers are always checksummed).
	// Off by default: TLS already protects the stream path; tcp and unix are for trusted networks.
	Checksum bool
	// Poll is how long a receiver polls its socket before it sleeps (transport.StreamOptions.Poll).
	Poll time.Duration
	// pollSet says whether Poll is the user's (--poll or HETSYNC_POLL) rather than the
	// command's default, which a rank on an oversubscribed host sets aside (onHost).
	pollSet bool
	// Arena is "on" or "off": whether a one-host job forms with its shared-memory arena.
	Arena string
	// PlanLinks is where the link matrix comes from (--plan-links: off, measure or a file; ""
	// for hetsync.Init's default).
	PlanLinks string
	// envErr is a malformed job setting in the environment, reported by validate.
	envErr error
	// Watch is what the ranks report while they run (watch_flags.go).
	Watch watchOptions
	// Sched is the scheduling policy of the ranks' threads (--sched); "" leaves it to
	// hetsync.Init's default (inherit) or, under launch, to the program's own.
	Sched string
	// schedFrom names where Sched came from, for its error.
	schedFrom string
}

// netFlags are the flags read into netOptions; poll is --poll's default.
func netFlags(poll time.Duration) []cli.Flag {
	// Usage lines stay short; docs/using.md ("Command-line flags") explains the longer ones.
	return inCategory(catTransport, append([]cli.Flag{
		&cli.StringFlag{Name: "transport", Value: "p2p", Usage: "p2p (libp2p, one process per rank) or mem (goroutines)"},
		&cli.StringFlag{Name: "data-path", Value: "auto", Usage: strings.Join(hetsync.DataPaths(), ", ") + " (auto: shm on one host; across hosts tls, or tcp with --security none)"},
		&cli.StringFlag{Name: "security", Value: "tls", Usage: "tls or none"},
		&cli.StringFlag{Name: "arena", Value: "on", Usage: "on or off: memory that every rank of a one-host job maps, which collectives may use instead of messages"},
		&cli.DurationFlag{Name: "join-timeout", Value: 60 * time.Second, Usage: "how long ranks wait for each other"},
		&cli.DurationFlag{Name: "poll", Value: poll, Usage: "how long a waiting receiver polls before it sleeps (0 = never poll)"},
		&cli.BoolFlag{Name: "checksum", Usage: "add a CRC-32C of every payload to its frame"},
		&cli.StringFlag{Name: "sched", DefaultText: "inherit", Usage: "scheduling policy of every rank's threads: " + strings.Join(schedpolicy.Names(), ", ") + " (batch: Linux's SCHED_BATCH)"},
		planLinksFlag(),
	}, watchFlags()...)...)
}

// netOptionsFrom reads the flags; a flag not given on the command line takes the job's setting
// that a launcher exported (HETSYNC_SECURITY, ...), as hetsync.Init does, so that a bench or
// train started by `hetsync launch --security none` runs as the job was launched.
func netOptionsFrom(c *cli.Context) netOptions {
	n := netOptions{
		Transport: c.String("transport"), DataPath: c.String("data-path"), Security: c.String("security"),
		JoinTimeout: c.Duration("join-timeout"), Checksum: c.Bool("checksum"), Poll: c.Duration("poll"),
		PlanLinks: c.String("plan-links"), Watch: watchOptionsFrom(c), Arena: c.String("arena"),
		Sched: c.String("sched"), schedFrom: "--sched",
	}
	env, err := launcher.SettingsFromEnviron(os.Getenv)
	if err != nil {
		n.envErr = err
		return n
	}
	fromEnv := func(flag string, set bool) bool { return set && !c.IsSet(flag) }
	if fromEnv("data-path", env.DataPath != "") {
		n.DataPath = env.DataPath
	}
	if fromEnv("security", env.Security != "") {
		n.Security = env.Security
	}
	if fromEnv("join-timeout", env.JoinTimeout != 0) {
		n.JoinTimeout = env.JoinTimeout
	}
	n.pollSet = c.IsSet("poll")
	if fromEnv("poll", env.Poll != 0) {
		n.Poll, n.pollSet = env.Poll, true
	}
	if fromEnv("checksum", env.Checksum) {
		n.Checksum = true
	}
	if fromEnv("plan-links", env.Links != "") {
		n.PlanLinks = env.Links
	}
	if fromEnv("arena", env.Arena != "") {
		n.Arena = env.Arena
	}
	if fromEnv("sched", env.Sched != "") {
		n.Sched, n.schedFrom = env.Sched, launcher.EnvSched
	}
	return n
}

// settings are the options as the variables a launcher passes to its ranks. A poll that is
// the command's default is not passed: each rank takes that default itself, and may set it
// aside on an oversubscribed host (onHost), which it must not do with a user's poll.
func (n netOptions) settings() launcher.Settings {
	s := launcher.Settings{Security: n.Security, DataPath: n.DataPath, JoinTimeout: n.JoinTimeout, Checksum: n.Checksum, Links: n.PlanLinks,
		Arena: n.Arena, Sched: n.Sched}
	if n.pollSet {
		s.Poll = n.Poll
	}
	return s
}

// initOptions are the options as hetsync.Init's.
func (n netOptions) initOptions() []hetsync.Option {
	opts := []hetsync.Option{hetsync.WithSecurity(n.Security), hetsync.WithDataPath(n.DataPath),
		hetsync.WithJoinTimeout(n.JoinTimeout), hetsync.WithPoll(n.Poll), hetsync.WithChecksum(n.Checksum),
		hetsync.WithArena(n.Arena != "off")}
	if n.PlanLinks != "" {
		opts = append(opts, hetsync.WithLinks(n.PlanLinks))
	}
	if n.Sched != "" {
		opts = append(opts, hetsync.WithSched(n.Sched))
	}
	return append(opts, n.Watch.initOptions()...)
}

func (n netOptions) validate() error {
	if n.envErr != nil {
		return n.envErr
	}
	if err := oneOf("transport", n.Transport, "p2p", "mem"); err != nil {
		return err
	}
	if err := n.checkPlanLinks(); err != nil {
		return err
	}
	if err := n.Watch.validate(); err != nil {
		return err
	}
	if err := oneOf("data-path", n.DataPath, hetsync.DataPaths()...); err != nil {
		return err
	}
	if n.JoinTimeout < 0 {
		return fmt.Errorf("--join-timeout %v: must not be negative", n.JoinTimeout)
	}
	if n.Sched != "" {
		if _, err := schedpolicy.Parse(n.Sched, n.schedFrom); err != nil {
			return err
		}
	}
	if n.Poll < 0 || n.Poll > time.Second {
		return fmt.Errorf("--poll %v: must be in [0, 1s]", n.Poll)
	}
	if n.Arena != "" { // "" is the default, on
		if err := oneOf("arena", n.Arena, "on", "off"); err != nil {
			return err
		}
	}
	return oneOf("security", n.Security, "tls", "none")
}

// benchPoll is bench's --poll default: a receiver that polls a little before it sleeps does not
// wait for a thread to be woken for each small message. 500 µs lies between the polls that
// served small messages best and those that served 1 MiB best, and bounds the CPU a wait
// spends (docs/results/tuning.md has the measurements). train does not poll: a fast rank that
// waits for a slow one at every round would spend CPU the slow one needs on a shared host.
const benchPoll = 500 * time.Microsecond

// setRankProcs sets how many OS threads run this rank's Go code: the host's CPUs shared among
// the ranks on it, at least one, as MPI binds a rank to a core. A rank with more threads than
// its share wakes an idle thread for almost every message it receives, and those wake-ups are
// what small messages wait for on an oversubscribed or virtualized host (docs/results/tuning.md
// has the measurement). GOMAXPROCS in the environment wins.
// Only bench does this: a training rank also runs services (the ESync state service, parameter
// server shards) that must answer while its compute goroutine runs.
func setRankProcs(localSize int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/max(1, localSize)))
}

// onHost is n for a rank that shares a host of cpus CPUs with localSize-1 other ranks. Where
// they outnumber the CPUs and the ranks talk over sockets (--data-path tcp or tls), a waiting
// receiver does not poll unless the user asked it to (--poll, HETSYNC_POLL): polling takes the
// CPU from the very rank it waits for. bench's 4 KiB ring allreduce at 64 ranks on 2 CPUs took
// 0.48 s a call polling 500 µs and 0.17 s without (docs/results/scale.md). The one-host paths
// (auto, shm, cma, unix) keep polling: their waits yield the core between looks, and their
// poll was tuned with more ranks than cores (docs/results/oversubscribed.md).
func (n netOptions) onHost(localSize, cpus int) netOptions {
	if localSize > cpus && !n.pollSet && (n.DataPath == "tcp" || n.DataPath == "tls") {
		n.Poll = 0
	}
	return n
}

// joinRank forms this process's job through hetsync.Init, as any program does, with the
// command line's transport options (as onHost fits them to a launched rank's host) and comm's
// (the algorithm, ...), runs fn on the rank's communicator and leaves the job (a failure to
// close counts when fn succeeded).
func (n netOptions) joinRank(ctx context.Context, fn func(*hetsync.Comm) error, comm ...hetsync.Option) error {
	if env, under, err := launcher.RankEnvFromEnviron(os.Getenv); err == nil && under {
		n = n.onHost(env.LocalSize, runtime.NumCPU())
	}
	c, err := hetsync.Init(ctx, append(n.initOptions(), comm...)...)
	if err != nil {
		return err
	}
	err = fn(c)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}

// collectiveFlagError is err with the --collective flag named where it is hetsync.Init's
// about the algorithm that flag gave (asked): Init names the option the command passed it.
func collectiveFlagError(err error, asked string) error {
	var ae *hetsync.AlgorithmError
	if errors.As(err, &ae) && ae.Algorithm == asked {
		return fmt.Errorf("rank %d: --collective %s: %w", ae.Rank, asked, ae.Err)
	}
	return err
}

// arenaNote says in a bench table's header whether the job formed with a shared-memory arena.
func arenaNote(ep transport.Endpoint) string {
	if transport.HostArena(ep) != nil {
		return "arena=on"
	}
	return "arena=none"
}

// collectiveOptions are the communicator's options for the algorithm name.
func (o benchOptions) collectiveOptions(name string, watch collective.Watch) collective.Options {
	opts := collective.Options{Algorithm: name, SegmentBytes: o.Segment, Codec: o.Codec, Compression: o.Compress,
		Links: o.Links, Replan: o.Replan, Watch: watch}
	if name == "ps" {
		opts.Servers = o.Servers
	}
	return opts
}

// commOptions are the options of the job's communicator beyond the transport's: the first
// requested algorithm with the segment, codec, servers and re-planning asked for. The job's
// watch and links are Init's own.
func (o benchOptions) commOptions() []hetsync.Option {
	return []hetsync.Option{hetsync.WithCollectiveOptions(o.collectiveOptions(o.Collectives[0], collective.Watch{}))}
}

// runBenches runs every requested algorithm on one rank of the job: the first on c, the job's
// communicator, which Init formed with it (commOptions), each further one on a communicator of
// its own over c's endpoint (a communicator runs one algorithm). Rank 0 prints the tables to
// out, gives each row to live (when not nil) and writes the JSON file; every rank returns the
// first error. A run whose checks found wrong elements is an error on rank 0 only, after
// everything has been printed, so that the launcher names rank 0 and the other ranks exit
// cleanly.
func runBenches(ctx context.Context, c *hetsync.Comm, o benchOptions, out io.Writer, live *exporter.Bench) error {
	ep, watch := c.Endpoint(), c.Watch()
	rank0 := ep.Rank() == 0
	var results []bench.Result
	var wrong int64
	// Results are float64 and must arrive exactly whatever --codec is, and the ranks meet
	// before each timed loop at a barrier that does not depend on the algorithm under test:
	// gather them with a plain ring communicator of their own, the bench's instrument.
	gather, err := collective.New(ep, collective.Options{Algorithm: "ring", Watch: watch})
	if err != nil {
		return fmt.Errorf("communicator for the results: %w", err)
	}
	for i, name := range o.Collectives {
		comm := c.Comm
		if i > 0 {
			if comm, err = collective.New(ep, o.collectiveOptions(name, watch)); err != nil {
				return fmt.Errorf("--collective %s: %w", name, err)
			}
		}
		meta := bench.Meta{P: ep.Size(), Collective: name, Op: o.Config.Op, Config: o.Config, Notes: append(o.notes(), arenaNote(ep))}
		tab := &bench.Table{W: out, Format: o.Format, Meta: meta}
		if rank0 {
			if err := tab.Header(); err != nil {
				return err
			}
		}
		replans := 0 // re-plans written so far
		runner := &bench.Runner{Comm: comm, Gather: gather, Config: o.Config, OnRow: func(r bench.Row) error {
			if !rank0 {
				return nil
			}
			if live != nil {
				live.Observe(exporter.BenchRow{Collective: name, Op: o.Config.Op.String(), Bytes: r.Bytes, Seconds: r.AvgUs / 1e6,
					AlgBW: r.AlgBW, BusBW: r.BusBW, Wrong: r.Wrong, Checked: r.Checks > 0})
			}
			if err := tab.Row(r); err != nil || o.Config.Op != bench.AllReduce {
				return err
			}
			return writePrediction(out, o.Format, comm, r, collective.Float32, &replans)
		}}
		rows, err := runner.Run(ctx)
		if err != nil {
			return err
		}
		if rank0 {
			if err := tab.Trailer(); err != nil {
				return err
			}
		}
		res := bench.NewResult(meta, rows)
		wrong += res.Wrong
		results = append(results, res)
	}
	if !rank0 {
		return nil
	}
	if o.JSONPath != "" {
		if err := writeJSONFile(o.JSONPath, results); err != nil {
			return err
		}
	}
	if wrong > 0 {
		return fmt.Errorf("rank 0: the checked iterations found %d wrong elements in total", wrong)
	}
	return nil
}

func writeJSONFile(path string, results []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-J: %w", err)
	}
	if err := bench.WriteJSON(f, results); err != nil {
		f.Close()
		return fmt.Errorf("-J %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-J %s: %w", path, err)
	}
	return nil
}

// benchRank runs this process as one rank of a launched job over libp2p.
func benchRank(ctx context.Context, o benchOptions, env launcher.RankEnv, out io.Writer) error {
	setRankProcs(env.LocalSize)
	err := o.joinRank(ctx, func(c *hetsync.Comm) error {
		o, err := o.withJobLinks(c.Links())
		if err != nil {
			return err
		}
		o.schedApplied = c.Settings().Sched
		live, err := o.serveResults(ctx, c.Rank(), os.Stderr)
		if err != nil {
			return err
		}
		return runBenches(ctx, c, o, out, live)
	}, o.commOptions()...)
	return collectiveFlagError(err, o.Collectives[0])
}

// serveResults starts, on rank 0 and with --metrics-addr, the server of the bench's results
// until ctx ends, and prints where it listens to errOut; nil when this rank serves nothing.
func (o benchOptions) serveResults(ctx context.Context, rank int, errOut io.Writer) (*exporter.Bench, error) {
	if o.MetricsAddr == "" || rank != 0 {
		return nil, nil
	}
	live := exporter.NewBench()
	at, err := live.Serve(ctx, o.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("rank 0: %w", err)
	}
	fmt.Fprintf(errOut, "rank 0: live bench results at http://%s/metrics\n", at)
	return live, nil
}

// benchMem runs every rank as a goroutine over the in-process transport.
func benchMem(ctx context.Context, o benchOptions, out io.Writer) error {
	err := hetsync.InitLocal(ctx, o.NP, func(ctx context.Context, c *hetsync.Comm) error {
		w := out
		if c.Rank() != 0 {
			w = io.Discard
		}
		live, err := o.serveResults(ctx, c.Rank(), os.Stderr)
		if err != nil {
			return err
		}
		return runBenches(ctx, c, o, w, live)
	}, append(o.Watch.initOptions(), o.commOptions()...)...)
	return collectiveFlagError(err, o.Collectives[0])
}

// benchLaunch starts --np ranks of this same command line through the launcher; rank 0's
// output (the table) passes through unprefixed.
func benchLaunch(c *cli.Context, o benchOptions) error {
	// Ranks on other hosts write their timelines there: their own check is the one that counts.
	if !hostsGiven(c) {
		if err := o.Watch.checkTimelineFiles(o.NP, os.Getenv); err != nil {
			return usageError{err}
		}
	}
	return launchSelf(c, "bench", o.NP)
}
