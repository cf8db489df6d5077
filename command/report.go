package command

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/report"
)

// reportDefaultOut is report's --out when none is given: beside the runs train writes, named
// after the time like them (metrics.RunPath), so that a report never overwrites another.
const reportDefaultOut = "runs/report-TIME"

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:         "report",
		OnUsageError: onUsageError,
		Usage:        "compare runs: report.md, summary.json and figures (PNG and SVG)",
		ArgsUsage:    "RUN_DIR...",
		Description: "report reads run directories written by hetsync train (config.json, metrics.jsonl,\n" +
			"eval.jsonl) and writes into --out: report.md (time to accuracy 0.70…0.90, speedup against a\n" +
			"baseline, time to the baseline's final accuracy minus a point and its ratio to the baseline's\n" +
			"time, final and best accuracy, throughput, traffic, per-rank computation ratios),\n" +
			"summary.json, and figures (accuracy against time per shard, throughput, traffic, computation\n" +
			"ratios, a per-rank timeline of each run, the seconds each rank made the others wait). A run\n" +
			"that ended early (Ctrl-C, a failed rank, --timeout) is reported from what it measured, and\n" +
			"says so. The default baseline of each scenario (model, ranks, seed, shard, heterogeneity) is\n" +
			"its first ssgd run; --baseline NAME compares every run with the run directory named NAME.",
		Flags: inCategory(catOutput,
			&cli.StringFlag{Name: "out", DefaultText: reportDefaultOut, Usage: "output directory"},
			&cli.StringFlag{Name: "baseline", DefaultText: "the first ssgd run of each scenario", Usage: "run name (directory base name) that speedups are against"},
		),
		Action: func(c *cli.Context) error {
			dirs, err := trailingFlags(c, "report", "out", "baseline")
			if err != nil {
				return err
			}
			if len(dirs) == 0 {
				return usagef("report: give one or more run directories")
			}
			for _, d := range dirs {
				if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
					return usagef("report: %s is not a run directory (%v)", d, orNotADir(err))
				}
			}
			out := c.String("out")
			if out == "" {
				out = metrics.RunPath("runs", "report", time.Now())
			}
			rep, err := report.Write(out, dirs, c.String("baseline"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s\nwrote %s, %s and %d figures\n", rep.Markdown(),
				filepath.Join(out, report.MarkdownFile), filepath.Join(out, report.SummaryFile), len(rep.Figures))
			return nil
		},
	}
}

// orNotADir is err, or for a path that exists but is no directory, an error saying so.
func orNotADir(err error) error {
	if err == nil {
		return errors.New("not a directory")
	}
	return err
}
