package command

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
)

func launchCommand() *cli.Command {
	return &cli.Command{
		Name:         "launch",
		OnUsageError: onUsageError,
		Usage:        "start N ranks of a command, here or over SSH, and supervise them",
		ArgsUsage:    "[--] COMMAND [ARGS...]",
		Description: "Every rank gets HETSYNC_RANK, HETSYNC_WORLD_SIZE, HETSYNC_LOCAL_RANK, HETSYNC_LOCAL_SIZE,\n" +
			"HETSYNC_RENDEZVOUS, HETSYNC_JOB_SECRET, RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT and the\n" +
			"job's settings: HETSYNC_SECURITY, HETSYNC_DATA_PATH, HETSYNC_JOIN_TIMEOUT (and HETSYNC_COLLECTIVE,\n" +
			"HETSYNC_POLL, HETSYNC_CHECKSUM, HETSYNC_SCHED when given), which hetsync.Init reads. Output lines are prefixed\n" +
			"\"[rank] \". When a rank fails, the others are stopped and hetsync exits with its status; with\n" +
			"--max-restarts K the whole job is then started again, up to K times, each rank seeing\n" +
			"HETSYNC_RESTART_COUNT (0 on the first attempt), as torchrun's TORCHELASTIC_RESTART_COUNT.",
		Flags: slices.Concat(inCategory(catJob,
			&cli.IntFlag{Name: "np", Aliases: []string{"n"}, DefaultText: "every slot of -H/--hostfile", Usage: "number of ranks (required without -H/--hostfile)"},
			&cli.DurationFlag{Name: "grace", Value: 3 * time.Second, Usage: "time between SIGTERM and SIGKILL when stopping ranks; 0 kills them at once"},
			&cli.StringFlag{Name: "rendezvous", DefaultText: "a free port on rank 0's host", Usage: "host:port for rank 0's rendezvous"},
			&cli.StringFlag{Name: "collective", Category: catTransport, DefaultText: "the program's", Usage: "allreduce algorithm of the ranks' hetsync.Init: " + strings.Join(collective.Algorithms(), ", ")},
			minNPFlag(),
			&cli.IntFlag{Name: "max-restarts", Usage: "when a rank fails, start all the job's ranks again, up to `K` times (each rank sees its attempt in HETSYNC_RESTART_COUNT)"},
		), settingsFlags(), jobFlags(false), []cli.Flag{launchOutFlag()}),
		Action: func(c *cli.Context) error {
			if c.Int("np") < 1 && !(hostsGiven(c) && c.Int("np") == 0) {
				return usagef("--np %d: need at least 1 rank", c.Int("np"))
			}
			if c.NArg() == 0 {
				return usagef("launch: no command given (usage: hetsync launch -np N [--] COMMAND ARGS...)")
			}
			if err := checkMinNP(c, c.Int("np")); err != nil {
				return usageError{err}
			}
			if c.Int("max-restarts") < 0 {
				return usagef("--max-restarts %d: must not be negative", c.Int("max-restarts"))
			}
			if c.Duration("grace") < 0 {
				return usagef("--grace %v: must not be negative", c.Duration("grace"))
			}
			if !hostsGiven(c) {
				if err := checkHostHolds(c.Int("np"), launchRankBytes, availableMemory(), "this host"); err != nil {
					return usageError{err}
				}
				if err := watchOptionsFrom(c).checkTimelineFiles(c.Int("np"), os.Getenv); err != nil {
					return usageError{err}
				}
			}
			settings, err := launchSettings(c)
			if err != nil {
				return usageError{err}
			}
			run, err := openLaunchRunDir(c)
			if err != nil {
				return usageError{err}
			}
			defer run.close()
			settings.RunDir = run.dir
			job := &launcher.Job{
				NP: c.Int("np"), Command: c.Args().Slice(), Env: append(os.Environ(), watchOptionsFrom(c).environ()...),
				Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Log: c.App.ErrWriter,
				Grace: c.Duration("grace"), KillAtOnce: c.Duration("grace") == 0, Rendezvous: c.String("rendezvous"), Settings: settings,
			}
			err = launcher.Restarts{Max: c.Int("max-restarts"), Log: c.App.ErrWriter}.Run(c.Context, func(_ context.Context, restart int) error {
				attempt := *job
				attempt.Env = launcher.WithRestartCount(job.Env, restart)
				return runJob(c, &attempt)
			})
			run.ended(c.App.ErrWriter, err)
			return err
		},
	}
}

// settingsFlags are the transport flags of bench and train that launch passes on to the
// program's ranks; --transport is not one of them (a launched program's ranks are processes).
func settingsFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range netFlags(0) {
		if f.Names()[0] != "transport" {
			out = append(out, f)
		}
	}
	return out
}

// launchSettings are the job's settings from launch's flags (or, for those not given, the
// variables of the same name inherited from the launching shell).
func launchSettings(c *cli.Context) (launcher.Settings, error) {
	n := netOptionsFrom(c)
	n.Transport = "p2p"
	if err := n.validate(); err != nil {
		return launcher.Settings{}, err
	}
	s := n.settings()
	s.Collective = c.String("collective")
	if s.Collective == "" {
		s.Collective = os.Getenv(launcher.EnvCollective)
	}
	if s.Collective != "" && !slices.Contains(collective.Algorithms(), s.Collective) {
		return s, fmt.Errorf("--collective %q: unknown (known: %s)", s.Collective, strings.Join(collective.Algorithms(), ", "))
	}
	return s, nil
}
