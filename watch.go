package hetsync

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// Variables that configure what a rank reports about itself while it runs. `hetsync launch`,
// `bench` and `train` export them from --peer-timeout, --stall, --timeline and --log-level;
// a program started by another launcher may set them itself.
const (
	// EnvPeerTimeout is how long a peer may send no heartbeat before it is failed (a Go
	// duration; 0 for the default, 8s; negative for no heartbeats).
	EnvPeerTimeout = "HETSYNC_PEER_TIMEOUT"
	// EnvStall is how long a call waits before the rank logs what it waits for (a Go
	// duration; 0 for the default, 5s; negative for never).
	EnvStall = "HETSYNC_STALL"
	// EnvTimeline is the timeline's file name: each rank writes its own, with its rank
	// inserted before the extension (trace.json: trace.rank0.json, trace.rank1.json, ...).
	EnvTimeline = "HETSYNC_TIMELINE"
	// EnvLog is the level of the rank's log: debug, info (default) or warn.
	EnvLog = "HETSYNC_LOG"
)

// watchConfig is what a rank reports about itself, from options or the variables above.
type watchConfig struct {
	peerTimeout, stall setting[time.Duration]
	timeline, level    setting[string]
}

// WithPeerTimeout fails a peer that sends no heartbeat for d (p2p jobs): every pending and
// later call that needs it fails naming it. Default: HETSYNC_PEER_TIMEOUT, else 8s; negative:
// no heartbeats.
func WithPeerTimeout(d time.Duration) Option {
	return func(c *config) {
		c.watch.peerTimeout = setting[time.Duration]{d, fmt.Sprintf("WithPeerTimeout(%v)", d)}
	}
}

// WithStallAfter logs, once a call has waited d, the peers it waits for and what they last
// did, and again every d. Default: HETSYNC_STALL, else 5s; negative: never.
func WithStallAfter(d time.Duration) Option {
	return func(c *config) { c.watch.stall = setting[time.Duration]{d, fmt.Sprintf("WithStallAfter(%v)", d)} }
}

// WithTimeline writes this rank's calls, messages and waits as Chrome trace events to path
// with the rank inserted before the extension (collective.TimelinePath); Close completes the
// file. Default: HETSYNC_TIMELINE, else none.
func WithTimeline(path string) Option {
	return func(c *config) { c.watch.timeline = setting[string]{path, fmt.Sprintf("WithTimeline(%q)", path)} }
}

// WithLogLevel sets the level of the rank's log on standard error when no WithLogger is
// given: "debug" (adds, per peer, the data path, the codec and the measured latency), "info"
// or "warn". Default: HETSYNC_LOG, else slog.Default() as it is.
func WithLogLevel(level string) Option {
	return func(c *config) { c.watch.level = setting[string]{level, fmt.Sprintf("WithLogLevel(%q)", level)} }
}

// ParseLogLevel reads debug, info or warn.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info or warn", s)
}

// watchSettings are a rank's resolved reporting settings.
type watchSettings struct {
	peerTimeout, stall time.Duration
	timeline           string
	logger             *slog.Logger
	debug              bool
}

// resolveWatch takes each explicit option, else its variable; a malformed variable is an
// error naming it. stderr is where a log level given without a logger writes.
func (c *config) resolveWatch(rank int, stderr io.Writer) (watchSettings, error) {
	var w watchSettings
	durations := []struct {
		s   setting[time.Duration]
		env string
		dst *time.Duration
	}{{c.watch.peerTimeout, EnvPeerTimeout, &w.peerTimeout}, {c.watch.stall, EnvStall, &w.stall}}
	for _, d := range durations {
		if d.s.from != "" {
			*d.dst = d.s.v
			continue
		}
		if v := strings.TrimSpace(c.getenv(d.env)); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil {
				return w, fmt.Errorf("rank %d: %s=%q: want a duration such as 10s", rank, d.env, v)
			}
			*d.dst = x
		}
	}
	w.timeline, _ = c.watch.timeline.pick(strings.TrimSpace(c.getenv(EnvTimeline)), EnvTimeline)
	w.logger = c.logger
	level, from := c.watch.level.pick(strings.TrimSpace(c.getenv(EnvLog)), EnvLog)
	if level != "" {
		lvl, err := ParseLogLevel(level)
		if err != nil {
			return w, fmt.Errorf("rank %d: %s: %w", rank, from, err)
		}
		if w.logger == nil {
			w.logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
		}
		w.debug = lvl <= slog.LevelDebug
	}
	if w.logger == nil {
		w.logger = slog.Default()
	}
	w.debug = w.debug || w.logger.Enabled(context.Background(), slog.LevelDebug)
	return w, nil
}

// withWatch resolves rank's reporting settings and puts them into o.
func (c *config) withWatch(o *collective.Options, rank int) (watchSettings, error) {
	w, err := c.resolveWatch(rank, os.Stderr)
	if err == nil {
		err = w.apply(o, rank)
	}
	return w, err
}

// apply puts the settings into the communicator's options, opening the timeline.
func (w watchSettings) apply(o *collective.Options, rank int) error {
	o.Watch.StallAfter = w.stall
	o.Watch.Logger = w.logger
	if w.timeline != "" {
		tl, err := collective.CreateTimeline(collective.TimelinePath(w.timeline, rank), rank)
		if err != nil {
			return err
		}
		o.Watch.Timeline = tl
	}
	return nil
}

// logPairs logs, at debug level, the data path, the codec and the latency of every pair this
// rank belongs to, as NCCL_DEBUG=INFO does: the link matrix's latency when the job measured
// one, else the control path's round trip from the heartbeats (waiting up to rttWait for the
// first ones).
func (c *Comm) logPairs(log *slog.Logger, o collective.Options) {
	ep := c.Endpoint()
	var paths []string
	if p, ok := ep.(interface{ DataPaths() []string }); ok {
		paths = p.DataPaths()
	}
	live, _ := transport.LivenessOf(ep)
	if live != nil && o.Links == nil {
		deadline := time.Now().Add(rttWait)
		for r := 0; r < c.Size() && time.Now().Before(deadline); r++ {
			for r != c.Rank() && live.Peer(r).RTT == 0 && live.Peer(r).Failed == nil && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for r := 0; r < c.Size(); r++ {
		if r == c.Rank() {
			continue
		}
		attrs := []any{"rank", c.Rank(), "peer", r, "codec", o.Codec.String()}
		if r < len(paths) {
			attrs = append(attrs, "data_path", paths[r])
		}
		switch {
		case o.Links != nil:
			l := o.Links.Links[c.Rank()][r]
			attrs = append(attrs, "latency", time.Duration(l.Alpha*float64(time.Second)), "latency_from", "link matrix")
			if l.Beta > 0 {
				attrs = append(attrs, "bandwidth_MBps", fmt.Sprintf("%.0f", 1/l.Beta/1e6))
			}
		case live != nil:
			attrs = append(attrs, "rtt", live.Peer(r).RTT, "latency_from", "heartbeat round trip (control path)")
		}
		log.Debug("hetsync: pair", attrs...)
	}
}

// rttWait bounds how long a rank logging its pairs at debug level waits for the first
// heartbeat round trips (a few heartbeat intervals).
const rttWait = 3 * time.Second
