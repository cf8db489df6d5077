package command

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// linksFlags are bench's flags for measuring the links instead of the collectives.
func linksFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "links", Usage: "measure every host pair's latency and bandwidth instead (--format json: the matrix --plan-links reads)"},
	}
}

// linksOptions are what bench --links reads: the job and network flags and --format.
type linksOptions struct {
	NP   int
	JSON bool
	netOptions
}

func linksOptionsFrom(c *cli.Context) (linksOptions, error) {
	o := linksOptions{NP: c.Int("np"), netOptions: netOptionsFrom(c)}
	if f := collectiveOnlyFlag(c, os.Getenv); f != "" {
		return o, fmt.Errorf("--%s: bench --links measures the links and runs no collective, so it does not take this flag", f)
	}
	switch f := c.String("format"); f {
	case "text":
	case "json":
		o.JSON = true
	default:
		return o, fmt.Errorf("--format %q: bench --links prints text or json", f)
	}
	if o.NP < 0 {
		return o, fmt.Errorf("--np %d: must be at least 1", o.NP)
	}
	if o.Transport == "mem" && o.NP == 0 {
		return o, fmt.Errorf("--transport mem needs --np")
	}
	return o, o.netOptions.validate()
}

// collectiveOnlyFlag names the first of bench's flags set on the command line that shape or
// record the collectives it times: --links runs none of them, and a flag accepted there would
// be silently ignored. -b, -e, -f and --target-sec also read the peers' harness environment
// (MIN_BYTES, ...), which may be set for other runs, so only a value given on the command line
// counts.
func collectiveOnlyFlag(c *cli.Context, getenv func(string) string) string {
	for _, f := range []string{"collective", "op", "n", "settle", "w", "c", "attribute", "o", "r", "J",
		"codec", "servers", "segment", "metrics-addr", "replan", "plan-links", "timeline"} {
		if c.IsSet(f) {
			return f
		}
	}
	for f, env := range map[string]string{"b": "MIN_BYTES", "e": "MAX_BYTES", "f": "STEP", "target-sec": "TARGET_SEC"} {
		if c.IsSet(f) && getenv(env) == "" {
			return f
		}
	}
	return ""
}

// benchLinks is bench --links: it measures the job's link matrix and rank 0 prints it.
func benchLinks(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("bench --links: unexpected arguments %q", c.Args().Slice())
	}
	o, err := linksOptionsFrom(c)
	if err != nil {
		return usageError{err}
	}
	out := c.App.Writer
	// The job measures here, once, and plans nothing: Init need not measure too.
	o.PlanLinks = hetsync.LinksOff
	if o.Transport == "mem" {
		return hetsync.InitLocal(c.Context, o.NP, func(ctx context.Context, comm *hetsync.Comm) error {
			return measureLinks(ctx, comm.Endpoint(), o, out)
		})
	}
	env, under, err := launcher.RankEnvFromEnviron(os.Getenv)
	if err != nil {
		return fmt.Errorf("bench --links: reading the rank environment: %w", err)
	}
	if under {
		if o.NP != 0 && o.NP != env.Size {
			return usageError{fmt.Errorf("--np %d but the launcher started %d ranks (%s=%d)", o.NP, env.Size, launcher.EnvWorldSize, env.Size)}
		}
		setRankProcs(env.LocalSize)
		return o.joinRank(c.Context, func(comm *hetsync.Comm) error {
			return measureLinks(c.Context, comm.Endpoint(), o, out)
		})
	}
	if o.NP == 0 {
		return usagef("--np: required when bench is not started by a launcher")
	}
	return launchSelf(c, "bench", o.NP)
}

// measuredLinks is what --format json prints: the matrix (topology.Unmarshal reads it) and how
// long measuring it took on rank 0.
type measuredLinks struct {
	*topology.Matrix
	Seconds float64 `json:"measure_s"`
}

// measureLinks measures on one rank; rank 0 prints.
func measureLinks(ctx context.Context, ep transport.Endpoint, o linksOptions, out io.Writer) error {
	start := time.Now()
	m, err := topology.Measure(ctx, ep, topology.MeasureOptions{})
	if err != nil {
		return err
	}
	took := time.Since(start)
	if ep.Rank() != 0 {
		return nil
	}
	if o.JSON {
		b, err := json.Marshal(measuredLinks{Matrix: m, Seconds: took.Seconds()})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	return writeLinksTable(out, m, took, o)
}

// writeLinksTable prints one row per direction of every host pair, measured between the
// ranks named (the first two ranks of a host for its local link, the first rank of each host
// across two): α in microseconds and the bandwidth 1/β in MB/s and Gbit/s.
func writeLinksTable(out io.Writer, m *topology.Matrix, took time.Duration, o linksOptions) error {
	ranksOf := m.RanksOf()
	var head strings.Builder
	hosts := fmt.Sprintf("%d hosts", len(ranksOf))
	if len(ranksOf) == 1 {
		hosts = "1 host"
	}
	fmt.Fprintf(&head, "# hetsync bench --links: %d ranks on %s, measured in %.3f s (transport=%s", m.P, hosts, took.Seconds(), o.Transport)
	if o.Transport == "p2p" {
		fmt.Fprintf(&head, " data-path=%s security=%s", o.DataPath, o.Security)
	}
	head.WriteString(")\n")
	for h, rs := range ranksOf {
		fmt.Fprintf(&head, "# host %d: ranks %s\n", h, joinInts(rs))
	}
	if _, err := io.WriteString(out, head.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "from host\tto host\tfrom rank\tto rank\talpha (us)\tMB/s\tGbit/s\t")
	row := func(hf, ht, rf, rt int) {
		l := m.Links[rf][rt]
		bw := 0.0
		if l.Beta > 0 {
			bw = 1 / l.Beta
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t\n", hf, ht, rf, rt, l.Alpha*1e6, bw/1e6, bw*8/1e9)
	}
	for hf, from := range ranksOf {
		for ht, to := range ranksOf {
			switch {
			case hf != ht:
				row(hf, ht, from[0], to[0])
			case len(from) >= 2:
				row(hf, hf, from[0], from[1])
				row(hf, hf, from[1], from[0])
			}
		}
	}
	return tw.Flush()
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
