package command

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport/p2p"
)

// watchOptions are what the ranks report about themselves while they run. A flag not given
// leaves the variable of the same setting (HETSYNC_PEER_TIMEOUT, ...) to hetsync.Init.
type watchOptions struct {
	PeerTimeout, Stall time.Duration
	Timeline, LogLevel string
	set                map[string]bool
}

// watchFlags are the flags read into watchOptions.
func watchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "peer-timeout", Category: catTransport, DefaultText: "$" + hetsync.EnvPeerTimeout + ", else " + p2p.DefaultPeerTimeout.String(),
			Usage: "fail a peer that sends no heartbeat for this long, naming it in every rank's pending call (negative: no heartbeats)"},
		&cli.DurationFlag{Name: "stall", Category: catTransport, DefaultText: "$" + hetsync.EnvStall + ", else " + collective.DefaultStallAfter.String(),
			Usage: "once a call has waited this long, log the peers it waits for and what they last did (negative: never)"},
		&cli.StringFlag{Name: "timeline", Category: catOutput, Usage: "write each rank's calls, messages and waits as Chrome trace events to `FILE`, the rank before its extension: trace.json gives trace.rank0.json, ... ($" + hetsync.EnvTimeline + ")"},
		&cli.StringFlag{Name: "log-level", Category: catOutput, Usage: "debug (adds each pair's data path, codec and latency), info or warn ($" + hetsync.EnvLog + ")"},
	}
}

func watchOptionsFrom(c *cli.Context) watchOptions {
	w := watchOptions{PeerTimeout: c.Duration("peer-timeout"), Stall: c.Duration("stall"),
		Timeline: c.String("timeline"), LogLevel: c.String("log-level"), set: map[string]bool{}}
	for _, f := range []string{"peer-timeout", "stall", "timeline", "log-level"} {
		w.set[f] = c.IsSet(f)
	}
	return w
}

func (w watchOptions) validate() error {
	if w.set["log-level"] {
		if _, err := hetsync.ParseLogLevel(w.LogLevel); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
	}
	if w.set["timeline"] && w.Timeline == "" {
		return fmt.Errorf("--timeline: empty file name")
	}
	return nil
}

// checkTimelineFiles checks, before any rank starts, that each of the np ranks this process
// starts on this host can create its timeline file (--timeline, or the HETSYNC_TIMELINE the
// ranks inherit), so that a missing or read-only directory is a usage error naming the flag
// and the file rather than a failure of every rank once the job has formed. The check opens
// each file for writing as the ranks will create it, without truncating it (the job may still
// be refused, and an earlier trace stays until the ranks replace it), and removes a file it
// created. getenv is os.Getenv outside tests.
func (w watchOptions) checkTimelineFiles(np int, getenv func(string) string) error {
	path, name := w.Timeline, "--timeline "+w.Timeline
	if !w.set["timeline"] {
		path = strings.TrimSpace(getenv(hetsync.EnvTimeline))
		name = hetsync.EnvTimeline + "=" + path
	}
	if path == "" {
		return nil
	}
	for r := range np {
		file := collective.TimelinePath(path, r)
		_, statErr := os.Stat(file)
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			return fmt.Errorf("%s: rank %d cannot write its timeline: %w", name, r, err)
		}
		err = f.Close()
		if errors.Is(statErr, os.ErrNotExist) {
			if rerr := os.Remove(file); err == nil {
				err = rerr
			}
		}
		if err != nil {
			return fmt.Errorf("%s: rank %d cannot write its timeline: %w", name, r, err)
		}
	}
	return nil
}

// initOptions are the flags given, as hetsync.Init's options.
func (w watchOptions) initOptions() []hetsync.Option {
	var opts []hetsync.Option
	if w.set["peer-timeout"] {
		opts = append(opts, hetsync.WithPeerTimeout(w.PeerTimeout))
	}
	if w.set["stall"] {
		opts = append(opts, hetsync.WithStallAfter(w.Stall))
	}
	if w.set["timeline"] {
		opts = append(opts, hetsync.WithTimeline(w.Timeline))
	}
	if w.set["log-level"] {
		opts = append(opts, hetsync.WithLogLevel(w.LogLevel))
	}
	return opts
}

// environ is the flags given, as the variables `hetsync launch` passes to the ranks.
func (w watchOptions) environ() []string {
	var env []string
	if w.set["peer-timeout"] {
		env = append(env, hetsync.EnvPeerTimeout+"="+w.PeerTimeout.String())
	}
	if w.set["stall"] {
		env = append(env, hetsync.EnvStall+"="+w.Stall.String())
	}
	if w.set["timeline"] {
		env = append(env, hetsync.EnvTimeline+"="+w.Timeline)
	}
	if w.set["log-level"] {
		env = append(env, hetsync.EnvLog+"="+w.LogLevel)
	}
	return env
}
