package command

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/trainer"
)

// resumeOptions are train's checkpoint, resume and restart flags.
type resumeOptions struct {
	CheckpointEvery trainer.EvalEvery
	// Resume is the run directory whose checkpoint the job continues ("" starts afresh).
	Resume      string
	MaxRestarts int
	// MinNP lets the job start, or restart, on fewer than --np ranks when hosts do not answer.
	MinNP int
	// failRank and failRound are --fail-at-round's fault: rank failRank kills itself after
	// round failRound (0-based) of the job's first attempt. failRank < 0: no fault.
	failRank, failRound int
}

func resumeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "checkpoint-every", Usage: "write a checkpoint into the run directory every N rounds (50) or every duration (30s)"},
		&cli.StringFlag{Name: "resume", Usage: "continue the run in `RUN_DIR` from its checkpoint, with no round lost or repeated (give the flags of the run it continues; those that define the run must match config.json)"},
		&cli.IntFlag{Name: "max-restarts", Category: catJob, Usage: "when a rank fails, start the job again from the run's last checkpoint, up to `K` times (needs --checkpoint-every)"},
		minNPFlag(),
		&cli.StringFlag{Name: "fail-at-round", Hidden: true, Usage: "fault injection for tests: RANK:ROUND makes rank RANK kill itself (SIGKILL) after round ROUND (0-based) of the job's first attempt"},
	}
}

// resumeOptionsFrom reads and checks the flags for the job o describes (its Config filled),
// and points o.Out at the run a resumed job continues.
func resumeOptionsFrom(c *cli.Context, o *trainOptions) (resumeOptions, error) {
	r := resumeOptions{Resume: c.String("resume"), MaxRestarts: c.Int("max-restarts"), MinNP: c.Int("min-np"), failRank: -1}
	err := checkMinNP(c, o.NP)
	if err != nil {
		return r, err
	}
	if s := c.String("checkpoint-every"); s != "" {
		if r.CheckpointEvery, err = trainer.ParseEvery("checkpoint-every", s); err != nil {
			return r, err
		}
	}
	if s := c.String("fail-at-round"); s != "" {
		rank, round, ok := strings.Cut(s, ":")
		if r.failRank, err = strconv.Atoi(rank); !ok || err != nil || r.failRank < 0 {
			return r, fmt.Errorf("--fail-at-round %q: want RANK:ROUND", s)
		}
		if r.failRound, err = strconv.Atoi(round); err != nil || r.failRound < 0 {
			return r, fmt.Errorf("--fail-at-round %q: want RANK:ROUND", s)
		}
	}
	if r.MaxRestarts < 0 {
		return r, fmt.Errorf("--max-restarts %d: must not be negative", r.MaxRestarts)
	}
	if r.checkpoints() || r.Resume != "" {
		if err := o.strategies.Checkpointable(&o.Config); err != nil {
			return r, err
		}
		if r.MinNP > 0 {
			if err := o.strategies.CheckpointResizable(&o.Config); err != nil {
				return r, fmt.Errorf("--min-np %d: %w", r.MinNP, err)
			}
		}
	}
	if r.Resume != "" {
		if o.Out != "" && filepath.Clean(o.Out) != filepath.Clean(r.Resume) {
			return r, fmt.Errorf("--out %s and --resume %s: a resumed run continues its own run directory (leave --out out)", o.Out, r.Resume)
		}
		o.Out = r.Resume
		// Rank 0 may run on another host: the ranks' own reading is the one that counts there.
		if !hostsGiven(c) {
			if err := checkResumeDir(r.Resume); err != nil {
				return r, err
			}
		}
	}
	if r.MaxRestarts > 0 {
		if o.Transport == "mem" {
			return r, fmt.Errorf("--max-restarts %d: --transport mem runs every rank in this process, which a failed rank ends; restarts need rank processes (--transport p2p)", r.MaxRestarts)
		}
		if !r.checkpoints() {
			return r, fmt.Errorf("--max-restarts %d needs --checkpoint-every: a restarted job continues from the run's last checkpoint", r.MaxRestarts)
		}
	}
	if r.failRank >= 0 && o.Transport == "mem" {
		return r, fmt.Errorf("--fail-at-round: --transport mem runs every rank in this process, which the fault would kill")
	}
	return r, nil
}

// minNPFlag is --min-np of launch and train.
func minNPFlag() cli.Flag {
	return &cli.IntFlag{Name: "min-np", Category: catJob, Usage: "start (and restart) on the hosts that answer with at least `M` ranks, fewer than --np (torchrun's --nnodes MIN:MAX; needs -H or --hostfile)"}
}

// checkMinNP checks --min-np against a job of np ranks (0: every slot of the hosts).
func checkMinNP(c *cli.Context, np int) error {
	m := c.Int("min-np")
	switch {
	case m < 0:
		return fmt.Errorf("--min-np %d: must not be negative", m)
	case m == 0:
		return nil
	case np > 0 && m > np:
		return fmt.Errorf("--min-np %d is more than --np %d", m, np)
	case !hostsGiven(c) && os.Getenv(launcher.EnvRank) == "":
		return fmt.Errorf("--min-np %d needs -H or --hostfile: ranks on this machine do not go away, hosts do", m)
	}
	return nil
}

// worldAllowed reports whether a launcher's world of size ranks suits --np and --min-np
// (minNP).
func (o trainOptions) worldAllowed(minNP, size int) bool {
	return o.NP == 0 || o.NP == size || (minNP > 0 && size >= minNP && size < o.NP)
}

func (r resumeOptions) checkpoints() bool { return r.CheckpointEvery != trainer.EvalEvery{} }

// checkResumeDir checks, before any rank starts, that dir holds a checkpoint this hetsync
// reads, that no other job holds it, and that the run's results can be written there.
func checkResumeDir(dir string) error {
	if err := trainer.HasCheckpoint(dir); err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	if err := checkNotHeld("--resume", dir); err != nil {
		return err
	}
	if err := checkWritable(dir); err != nil {
		return fmt.Errorf("--resume %s: %w", dir, err)
	}
	return nil
}

// rankOptions adds the checkpoint, resume and fault flags to a rank's options.
func (r resumeOptions) rankOptions(rank int, ropts *trainer.TrainOptions) {
	ropts.Checkpoint.Every, ropts.ResumeDir = r.CheckpointEvery, r.Resume
	if r.failRank == rank && restartCount() == 0 {
		after := ropts.AfterRound // a live exporter's, kept
		ropts.AfterRound = func(rec *metrics.RoundRecord) {
			if after != nil {
				after(rec)
			}
			if rec.Round == r.failRound {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
}

// restartCount is this rank's job's restart count (launcher.EnvRestartCount; 0 when unset).
func restartCount() int {
	n, _ := strconv.Atoi(os.Getenv(launcher.EnvRestartCount))
	return n
}

// runTrainJob runs job, a launched train, and with --max-restarts starts it again after a
// rank fails, from the run directory's last checkpoint: the restarted ranks get --resume.
func runTrainJob(c *cli.Context, o trainOptions, extra []string) error {
	policy := launcher.Restarts{Max: o.MaxRestarts, Log: c.App.ErrWriter, Before: func(_ int, failure error) error {
		if err := trainer.HasCheckpoint(o.Out); err != nil {
			return fmt.Errorf("%w; not restarted: %s holds no checkpoint yet (the job failed before its first --checkpoint-every)", failure, o.Out)
		}
		if o.Resume == "" {
			o.Resume = o.Out
			extra = append(extra, "--resume", o.Out)
		}
		return nil
	}}
	return policy.Run(c.Context, func(_ context.Context, restart int) error {
		job, err := selfJob(c, "train", o.NP, extra...)
		if err != nil {
			return err
		}
		job.Env = launcher.WithRestartCount(job.Env, restart)
		return runJob(c, job)
	})
}
