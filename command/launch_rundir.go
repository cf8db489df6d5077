package command

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"
)

// launchOutFlag is launch's --out: the run directory of the program's hetsync.Session.
func launchOutFlag() cli.Flag {
	return &cli.StringFlag{Name: "out", Category: catOutput, DefaultText: "none",
		Usage: "run directory that rank 0's hetsync.Session writes, as hetsync train --out (HETSYNC_RUN_DIR)"}
}

// launchRunDir is launch's --out, checked and held for the job as train holds its own: a
// directory that already holds a run, or that another job holds, is refused before any rank
// starts, and a job that fails leaves a summary.json saying so.
type launchRunDir struct {
	dir   string
	local bool     // rank 0 runs on this host, which holds the directory
	lock  *runLock // nil without --out, on other hosts, or under the launching job's lock
}

// openLaunchRunDir reads --out and, when rank 0 runs here, creates and locks it.
func openLaunchRunDir(c *cli.Context) (*launchRunDir, error) {
	r := &launchRunDir{dir: c.String("out"), local: !hostsGiven(c)}
	if r.dir == "" {
		return r, nil
	}
	if c.Int("max-restarts") > 0 {
		// A restarted program's session would find the run directory holding the first
		// attempt's run, and a program's session does not resume it.
		return nil, errors.New("--out and --max-restarts: a restarted program's session cannot continue the run directory; leave one out")
	}
	if r.local {
		var err error
		if r.lock, err = prepareRunDir(r.dir); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ended closes the run directory of a job that failed with err (nil: it did not) as train
// closes its own: a summary.json that says it ended early and why, when rank 0 wrote none.
func (r *launchRunDir) ended(errOut io.Writer, err error) {
	if err != nil && r.dir != "" && r.local {
		closeFailedRun(errOut, "hetsync launch", r.dir, err)
	}
}

func (r *launchRunDir) close() {
	if r.lock != nil {
		r.lock.Close()
	}
}
