package command

import (
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/bench"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/metrics/exporter"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// benchOptions is the validated command line of `hetsync bench`.
type benchOptions struct {
	NP          int // 0: take the world size from the launcher's environment
	Collectives []string
	Config      bench.Config
	Format      bench.Format
	JSONPath    string
	netOptions
	Codec     transport.Codec
	CodecName string
	// Compress is --compress: how allreduces encode what they send (collective.Compression).
	Compress     collective.Compression
	CompressName string
	Servers      int
	Segment      int
	// Links is the matrix the collectives plan from: --plan-links's file, or, once the job has
	// formed, what it measured.
	Links *topology.Matrix
	// Replan is --replan (else HETSYNC_REPLAN): how auto follows links that change.
	Replan collective.ReplanOptions
	// MetricsAddr is --metrics-addr: where rank 0 serves the results live ("" nowhere).
	MetricsAddr string
	// schedApplied is the scheduling policy this rank's threads run under, once it joined.
	schedApplied string
}

// preferredOrder is the order of "--collective all"; registered algorithms not listed here
// follow, sorted. "auto" is a selector, not an algorithm of its own, and is left out of "all".
var preferredOrder = [...]string{"ring", "butterfly", "binary-blocks", "ps"}

func parseCollectives(s string) ([]string, error) {
	known := collective.Algorithms()
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			continue
		case name == "all":
			for _, n := range preferredOrder {
				if slices.Contains(known, n) && !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
			for _, n := range known {
				if n != "auto" && !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		case slices.Contains(known, name):
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			names, ok := topoCollectives(name)
			if !ok {
				return nil, fmt.Errorf("--collective: unknown algorithm %q (known: %s, all, %s, and with a link matrix %s)",
					name, strings.Join(known, ", "), configsKeyword, strings.Join(collective.Configurations(), ", "))
			}
			for _, n := range names {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--collective %q: no algorithm named (known: %s, all)", s, strings.Join(known, ", "))
	}
	return out, nil
}

func parseCodec(s string) (transport.Codec, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none", "":
		return transport.CodecNone, nil
	case "s2":
		return transport.CodecS2, nil
	case "zstd":
		return transport.CodecZstd, nil
	case "fp16":
		return transport.CodecFP16, nil
	case "bf16":
		return transport.CodecBF16, nil
	}
	return 0, fmt.Errorf("--codec %q: unknown (known: none, s2, zstd, fp16, bf16)", s)
}

func oneOf(flag, v string, known ...string) error {
	if slices.Contains(known, v) {
		return nil
	}
	return fmt.Errorf("--%s %q: unknown (known: %s)", flag, v, strings.Join(known, ", "))
}

// benchOptionsFrom reads the command line of a process that job says whether a launcher
// started, checked once for the job's size: the launcher's, else --np.
func benchOptionsFrom(c *cli.Context, job rankJob) (benchOptions, error) {
	o := benchOptions{
		NP: c.Int("np"), JSONPath: c.String("J"), netOptions: netOptionsFrom(c), CodecName: c.String("codec"),
		CompressName: c.String("compress"), Servers: c.Int("servers"), MetricsAddr: c.String("metrics-addr"),
	}
	var err error
	if o.NP < 0 {
		return o, fmt.Errorf("--np %d: must be at least 1", o.NP)
	}
	if o.Collectives, err = parseCollectives(c.String("collective")); err != nil {
		return o, err
	}
	cfg := bench.Config{Factor: c.Int("f"), Warmup: c.Int("w"), Iters: c.Int("n"), Check: c.Int("c"), Root: c.Int("r"),
		Attribute: c.Int("attribute"), TargetSeconds: c.Float64("target-sec"), Settle: c.Duration("settle")}
	if cfg.Op, err = bench.ParseOp(c.String("op")); err != nil {
		return o, fmt.Errorf("--op: %v", err)
	}
	if cfg.RedOp, err = bench.ParseRedOp(c.String("o")); err != nil {
		return o, fmt.Errorf("-o: %v", err)
	}
	if cfg.MinBytes, err = bench.ParseSize(c.String("b")); err != nil {
		return o, fmt.Errorf("-b: %v", err)
	}
	if cfg.MaxBytes, err = bench.ParseSize(c.String("e")); err != nil {
		return o, fmt.Errorf("-e: %v", err)
	}
	seg, err := bench.ParseSize(c.String("segment"))
	if err != nil {
		return o, fmt.Errorf("--segment: %v", err)
	}
	if seg > 1<<30 {
		return o, fmt.Errorf("--segment %s: larger than 1G", c.String("segment"))
	}
	o.Segment = int(seg)
	p := o.NP // the job's number of ranks: the launcher's world size, else --np
	switch {
	case job.under && o.NP != 0 && o.NP != job.env.Size:
		return o, fmt.Errorf("--np %d but the launcher started %d ranks (%s=%d)", o.NP, job.env.Size, launcher.EnvWorldSize, job.env.Size)
	case job.under:
		p = job.env.Size
	case o.NP == 0 && c.String("transport") == "mem":
		return o, fmt.Errorf("--transport mem needs --np")
	case o.NP == 0:
		return o, fmt.Errorf("--np: required when bench is not started by a launcher")
	}
	if err := cfg.Validate(p); err != nil {
		return o, err
	}
	o.Config = cfg
	if o.Format, err = bench.ParseFormat(c.String("format")); err != nil {
		return o, fmt.Errorf("--format: %v", err)
	}
	// Rank 0 may run on another host, whose own writing is the one that counts there.
	if o.JSONPath != "" && !hostsGiven(c) {
		if err := checkOutputFile(o.JSONPath); err != nil {
			return o, fmt.Errorf("-J %s: %w", o.JSONPath, err)
		}
	}
	if err := o.netOptions.validate(); err != nil {
		return o, err
	}
	if o.Codec, err = parseCodec(o.CodecName); err != nil {
		return o, err
	}
	if err := o.compression(c.IsSet("compress"), p); err != nil {
		return o, err
	}
	if o.Servers < 0 || o.Servers > p {
		return o, fmt.Errorf("--servers %d: must be in [0, %d] (0 = every rank serves a shard)", o.Servers, p)
	}
	if o.Servers > 0 && !slices.Contains(o.Collectives, "ps") {
		return o, fmt.Errorf("--servers %d: only the ps collective has servers (--collective %s)", o.Servers, strings.Join(o.Collectives, ","))
	}
	if o.Links, err = readLinks(o.linksFile()); err != nil {
		return o, err
	}
	if o.Replan, err = replanFrom(c); err != nil {
		return o, err
	}
	if err := o.checkLinks(p); err != nil {
		return o, err
	}
	if o.MetricsAddr != "" {
		if _, err := exporter.RankAddr(o.MetricsAddr, 0); err != nil {
			return o, err
		}
	}
	return o, nil
}

// compression reads --compress into o for a job of p ranks: the communicator's compression,
// the checks' tolerance (the compression's bound on the bench's small integers) and, when the
// flag was given, the bytes-sent column.
func (o *benchOptions) compression(given bool, p int) error {
	z, err := collective.ParseCompression(o.CompressName)
	if err != nil {
		return fmt.Errorf("--compress: %w", err)
	}
	o.Compress, o.Config.ShowSent = z, given
	if z.Codec == nil || z.Codec.Name() == "none" {
		return nil
	}
	if o.Codec.Lossy() {
		return fmt.Errorf("--compress %s with --codec %s: both are lossy float encodings, choose one", o.CompressName, o.CodecName)
	}
	if o.Config.Op != bench.AllReduce {
		return fmt.Errorf("--compress %s: compresses allreduce only, not --op %s", o.CompressName, o.Config.Op)
	}
	if red := o.Config.RedOp; red != 0 && red != collective.Sum && red != collective.Avg {
		return fmt.Errorf("--compress %s: compresses a sum or an average, not -o %s", o.CompressName, red)
	}
	// The checked values are integers in [-8, 8] (bench's data.go): their magnitudes sum to
	// at most 8p.
	bound := []float32{0}
	if err := collective.CompressedBound(z.Codec, p, bound, []float32{float32(8 * p)}); err != nil {
		return err
	}
	o.Config.Tolerance = float64(bound[0])
	return nil
}

// benchWorkingSet is what a bench rank holds besides its floor: its send and receive buffers of
// the largest size.
func benchWorkingSet(cfg bench.Config) uint64 { return 2 * uint64(max(cfg.MaxBytes, 0)) }

func (o benchOptions) notes() []string {
	n := []string{"transport=" + o.Transport}
	if o.Transport == "p2p" {
		n = append(n, "data-path="+o.DataPath, "security="+o.Security)
	}
	n = append(n, "codec="+o.CodecName)
	if o.Config.ShowSent {
		n = append(n, "compress="+o.CompressName)
	}
	if o.Checksum {
		n = append(n, "checksum=crc32c")
	}
	if o.Servers > 0 {
		n = append(n, fmt.Sprintf("servers=%d", o.Servers))
	}
	if o.PlanLinks != "" {
		n = append(n, "links="+o.PlanLinks)
	}
	if o.Replan != (collective.ReplanOptions{}) {
		n = append(n, "replan="+o.Replan.String())
	}
	if o.schedApplied != "" {
		n = append(n, "sched="+o.schedApplied)
	}
	return n
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:         "bench",
		OnUsageError: onUsageError,
		Usage:        "measure collectives (nccl-tests conventions: -b -e -f, -w -n -c)",
		Description: "Without a launcher around it, bench starts --np ranks of itself on this machine and rank 0\n" +
			"prints the table. Under a launcher (HETSYNC_RANK set) it runs as one rank. --transport mem runs\n" +
			"all ranks as goroutines of one process. -b, -e and -f also read MIN_BYTES, MAX_BYTES and STEP,\n" +
			"and --target-sec reads TARGET_SEC (the environment of shared/peers/run_all.sh).",
		// -n is nccl-tests' iteration count here, so --np has no -n alias as in launch and train.
		Flags: slices.Concat(inCategory(catBenchmark,
			&cli.IntFlag{Name: "np", Category: catJob, DefaultText: "the launcher's world size", Usage: "number of ranks (required without a launcher)"},
			&cli.StringFlag{Name: "collective", Value: collective.DefaultAlgorithm, Usage: "algorithms, comma-separated, or all; with --plan-links also configurations (hier-NAME, NAME/ORDER) or configs"},
			&cli.StringFlag{Name: "op", Value: "allreduce", Usage: strings.Join(bench.OpNames(), ", ")},
			&cli.StringFlag{Name: "b", Value: "4K", EnvVars: []string{"MIN_BYTES"}, Usage: "smallest size"},
			&cli.StringFlag{Name: "e", Value: "64M", EnvVars: []string{"MAX_BYTES"}, Usage: "largest size"},
			&cli.IntFlag{Name: "f", Value: 4, EnvVars: []string{"STEP"}, Usage: "size step factor"},
			&cli.IntFlag{Name: "n", Value: 20, Usage: "timed iterations per size (without --target-sec)"},
			&cli.DurationFlag{Name: "settle", Value: 300 * time.Millisecond, Usage: "run the first size untimed this long before anything is timed (0 = no settling)"},
			&cli.Float64Flag{Name: "target-sec", EnvVars: []string{"TARGET_SEC"}, DefaultText: "-n calls", Usage: "size each timed loop to about this many seconds (at least 2 calls)"},
			&cli.IntFlag{Name: "w", Value: 5, Usage: "warm-up iterations per size"},
			&cli.IntFlag{Name: "c", Value: 1, Usage: "checked iterations per size (0 = no check)"},
			&cli.IntFlag{Name: "attribute", Value: 3, Usage: "untimed iterations per size that measure the arrival skew and the late rank (0 = none)"},
			&cli.StringFlag{Name: "o", Value: "sum", Usage: "reduction: sum, avg, min, max, prod"},
			&cli.IntFlag{Name: "r", Value: 0, Usage: "broadcast root"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text (nccl-tests table) or tsv (shared/peers columns); with --links, text or json"},
			&cli.StringFlag{Name: "J", Usage: "also write the results as JSON to this file"},
			&cli.StringFlag{Name: "codec", Value: "none", Usage: "none, s2, zstd, fp16, bf16"},
			&cli.StringFlag{Name: "compress", Value: "none", Usage: "allreduce's messages as none, bf16, fp16, int8 (reduced in float32), or auto: int8 between hosts only; adds the bytes sent per rank to the table"},
			&cli.IntFlag{Name: "servers", DefaultText: "every rank", Usage: "ps: number of server ranks"},
			&cli.StringFlag{Name: "segment", Value: "0", DefaultText: "the algorithm's", Usage: "pipelining segment size"},
			&cli.StringFlag{Name: "metrics-addr", Category: catOutput, Usage: "rank 0 serves each size's results as Prometheus metrics at http://HOST:PORT/metrics (port 0: a free port)"},
			replanFlag(),
		), netFlags(benchPoll), jobFlags(true), inCategory(catBenchmark, linksFlags()...)),
		Action: func(c *cli.Context) error {
			if c.Bool("links") {
				return benchLinks(c)
			}
			if c.NArg() > 0 {
				return usagef("bench: unexpected arguments %q", c.Args().Slice())
			}
			var job rankJob
			if c.String("transport") != "mem" {
				var err error
				if job.env, job.under, err = launcher.RankEnvFromEnviron(os.Getenv); err != nil {
					return fmt.Errorf("bench: reading the rank environment: %w", err)
				}
			}
			o, err := benchOptionsFrom(c, job)
			if err != nil {
				return usageError{err}
			}
			if err := checkLocalRanks(c, o.NP, o.Transport, benchWorkingSet(o.Config)); err != nil {
				return usageError{err}
			}
			if o.Transport == "mem" {
				if err := o.Watch.checkTimelineFiles(o.NP, os.Getenv); err != nil {
					return usageError{err}
				}
				return benchMem(c.Context, o, c.App.Writer)
			}
			if job.under {
				stop, err := startRankProfile(job.env.Rank)
				if err != nil {
					return err
				}
				defer stop()
				return benchRank(c.Context, o, job.env, c.App.Writer)
			}
			return benchLaunch(c, o)
		},
	}
}

// envCPUProfile names the environment variable that makes every bench rank write a CPU profile
// to $HETSYNC_CPUPROFILE.rank<N> (for tuning the transport and the collectives).
const envCPUProfile = "HETSYNC_CPUPROFILE"

func startRankProfile(rank int) (stop func(), err error) {
	base := os.Getenv(envCPUProfile)
	if base == "" {
		return func() {}, nil
	}
	path := fmt.Sprintf("%s.rank%d", base, rank)
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %s: %w", rank, envCPUProfile, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("rank %d: %s=%s: %w", rank, envCPUProfile, base, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
