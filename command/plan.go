package command

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/bench"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/topology"
)

// planCommand is `hetsync plan`: what auto would run on a cluster described by its shape (or
// by a measured link matrix), for each size, with every configuration's predicted time. It
// runs nothing and needs no cluster, so users size clusters they do not have.
func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "print what auto would run on a cluster you describe",
		Description: "The network is --hosts hosts of --ranks-per-host ranks dealt in order into --groups groups " +
			"(racks), with a link inside a host, one between hosts of a group (access) and one between groups " +
			"(uplink); or --links FILE, a measured matrix (hetsync bench --links --format json). Sizes go from " +
			"-b to -e by a factor of -f, as bench's do.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: 128, Usage: "hosts"},
			&cli.IntFlag{Name: "ranks-per-host", Value: 8, Usage: "ranks on each host"},
			&cli.IntFlag{Name: "groups", Value: 2, Usage: "groups (racks) the hosts are dealt into, in order"},
			&cli.Float64Flag{Name: "local-gbps", Value: 80, Usage: "bandwidth between two ranks of a host, Gbit/s"},
			&cli.DurationFlag{Name: "local-latency", Value: 2 * time.Microsecond, Usage: "latency between two ranks of a host"},
			&cli.Float64Flag{Name: "access-gbps", Value: 25, Usage: "bandwidth between hosts of a group, Gbit/s"},
			&cli.DurationFlag{Name: "access-latency", Value: 10 * time.Microsecond, Usage: "latency between hosts of a group"},
			&cli.Float64Flag{Name: "uplink-gbps", Value: 2.5, Usage: "bandwidth between groups, Gbit/s"},
			&cli.DurationFlag{Name: "uplink-latency", Value: 20 * time.Microsecond, Usage: "latency between groups"},
			&cli.StringFlag{Name: "links", Usage: "plan from a measured link matrix `FILE` instead of the shape flags"},
			&cli.StringFlag{Name: "op", Value: "allreduce", Usage: "the collective `OP`: allreduce, reduce-scatter or allgather"},
			&cli.StringFlag{Name: "b", Value: "4K", Usage: "smallest `SIZE`"},
			&cli.StringFlag{Name: "e", Value: "64M", Usage: "largest `SIZE`"},
			&cli.IntFlag{Name: "f", Value: 4, Usage: "size step factor"},
			&cli.StringFlag{Name: "segment", Value: "1M", Usage: "`SIZE` of a message's segments (bench's --segment)"},
			&cli.BoolFlag{Name: "candidates", Usage: "also print every configuration's predicted time for each size"},
		},
		Action: runPlan,
	}
}

func runPlan(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("plan: unexpected argument %q", c.Args().First())
	}
	hm, what, err := planNetwork(c)
	if err != nil {
		return err
	}
	op, err := bench.ParseOp(c.String("op"))
	if err != nil {
		return usagef("--op: %v", err)
	}
	name, ok := map[bench.Op]string{bench.AllReduce: "allreduce", bench.ReduceScatter: "reduce-scatter", bench.AllGather: "allgather"}[op]
	if !ok {
		return usagef("--op %s: plan knows allreduce, reducescatter and allgather", op)
	}
	lo, err := bench.ParseSize(c.String("b"))
	if err != nil {
		return usagef("-b: %v", err)
	}
	hi, err := bench.ParseSize(c.String("e"))
	if err != nil {
		return usagef("-e: %v", err)
	}
	if lo < 4 {
		return usagef("-b %s: want at least one float32 (4 bytes)", c.String("b"))
	}
	sweep, err := bench.Sweep(lo, hi, c.Int("f"))
	if err != nil {
		return usageError{err}
	}
	sizes := make([]int, len(sweep))
	for i, s := range sweep {
		sizes[i] = int(s)
	}
	seg, err := bench.ParseSize(c.String("segment"))
	if err != nil || seg < 4 || seg > 1<<30 {
		return usagef("--segment %s: want 4 bytes to 1G", c.String("segment"))
	}
	began := time.Now()
	plans, err := collective.Plan(hm, name, sizes, int(seg))
	if err != nil {
		return err
	}
	took := time.Since(began)
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "# %s, %d ranks on %d hosts: %s\n", op, hm.P, hm.Hosts(), what)
	fmt.Fprintf(w, "size\tpredicted\tbusbw (GB/s)\tauto runs\n")
	for _, pl := range plans {
		fmt.Fprintf(w, "%s\t%v\t%.3f\t%s\n", bench.FormatSize(int64(pl.Bytes)), roundTime(pl.Predicted),
			busBandwidth(op, pl.Bytes, hm.P, pl.Predicted), pl.Algorithm)
	}
	if c.Bool("candidates") {
		fmt.Fprintf(w, "\nconfiguration")
		for _, pl := range plans {
			fmt.Fprintf(w, "\t%s", bench.FormatSize(int64(pl.Bytes)))
		}
		fmt.Fprintln(w)
		for i, cand := range plans[0].Candidates {
			fmt.Fprint(w, cand.Algorithm)
			for _, pl := range plans {
				if pc := pl.Candidates[i]; pc.Priced {
					fmt.Fprintf(w, "\t%v", roundTime(pc.Predicted))
				} else {
					fmt.Fprint(w, "\t-")
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "# planned %d sizes in %v\n", len(plans), took.Round(time.Millisecond))
	return w.Flush()
}

// planNetwork is the network the flags describe, and a line that says what it is.
func planNetwork(c *cli.Context) (*topology.HostMatrix, string, error) {
	if path := c.String("links"); path != "" {
		m, err := topology.ReadFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("--links: %w", err)
		}
		return m.HostLevel(), "measured links from " + path, nil
	}
	link := func(gbps string, latency string) (topology.Link, error) {
		bw := c.Float64(gbps)
		if !(bw > 0) {
			return topology.Link{}, usagef("--%s %g: want a bandwidth above 0", gbps, bw)
		}
		if c.Duration(latency) < 0 {
			return topology.Link{}, usagef("--%s %v: want a latency of 0 or more", latency, c.Duration(latency))
		}
		return topology.Link{Alpha: c.Duration(latency).Seconds(), Beta: 8 / (bw * 1e9)}, nil
	}
	t := topology.Tiers{Hosts: c.Int("hosts"), RanksPerHost: c.Int("ranks-per-host"), Groups: c.Int("groups")}
	var err error
	if t.Local, err = link("local-gbps", "local-latency"); err != nil {
		return nil, "", err
	}
	if t.Access, err = link("access-gbps", "access-latency"); err != nil {
		return nil, "", err
	}
	if t.Uplink, err = link("uplink-gbps", "uplink-latency"); err != nil {
		return nil, "", err
	}
	if t.Hosts*t.RanksPerHost > 1<<16 {
		return nil, "", usagef("--hosts %d --ranks-per-host %d: more than 65536 ranks", t.Hosts, t.RanksPerHost)
	}
	hm, err := t.HostMatrix()
	if err != nil {
		return nil, "", usagef("%v", err)
	}
	what := fmt.Sprintf("%d groups; %g Gb/s %v inside a host, %g Gb/s %v between hosts of a group, %g Gb/s %v between groups",
		t.Groups, c.Float64("local-gbps"), c.Duration("local-latency"), c.Float64("access-gbps"), c.Duration("access-latency"),
		c.Float64("uplink-gbps"), c.Duration("uplink-latency"))
	return hm, what, nil
}

// busBandwidth is nccl-tests' bus bandwidth of a call (GB/s).
func busBandwidth(op bench.Op, bytes, p int, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return float64(bytes) / t.Seconds() / 1e9 * bench.BusFactor(op, p)
}

// roundTime keeps three significant digits.
func roundTime(d time.Duration) time.Duration {
	for unit := time.Nanosecond; unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}
