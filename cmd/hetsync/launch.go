package main

import (
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
)

func launchCommand() *cli.Command {
	return &cli.Command{
		Name:         "launch",
		OnUsageError: onUsageError,
		Usage:        "start N ranks of a command on this machine and supervise them",
		ArgsUsage:    "[--] COMMAND [ARGS...]",
		Description: "Every rank gets HETSYNC_RANK, HETSYNC_WORLD_SIZE, HETSYNC_LOCAL_RANK, HETSYNC_LOCAL_SIZE,\n" +
			"HETSYNC_RENDEZVOUS, HETSYNC_JOB_SECRET and RANK/WORLD_SIZE/LOCAL_RANK. Output lines are prefixed\n" +
			"\"[rank] \". When a rank fails, the others are stopped and hetsync exits with its status.",
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "np", Usage: "number of ranks (required without -H/--hostfile; with them, default: every slot)"},
			&cli.DurationFlag{Name: "grace", Value: 3 * time.Second, Usage: "time between SIGTERM and SIGKILL when stopping ranks"},
			&cli.StringFlag{Name: "rendezvous", Usage: "host:port for rank 0's rendezvous (default: a free port on rank 0's host)"},
		}, jobFlags(false)...),
		Action: func(c *cli.Context) error {
			if c.Int("np") < 1 && !(hostsGiven(c) && c.Int("np") == 0) {
				return usagef("--np %d: need at least 1 rank", c.Int("np"))
			}
			if c.NArg() == 0 {
				return usagef("launch: no command given (usage: hetsync launch -np N [--] COMMAND ARGS...)")
			}
			if c.Duration("grace") < 0 {
				return usagef("--grace %v: must not be negative", c.Duration("grace"))
			}
			job := &launcher.Job{
				NP: c.Int("np"), Command: c.Args().Slice(), Env: os.Environ(),
				Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Log: c.App.ErrWriter,
				Grace: c.Duration("grace"), Rendezvous: c.String("rendezvous"),
			}
			return runJob(c, job)
		},
	}
}
