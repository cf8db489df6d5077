package hetsync

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/transport/p2p"
)

// Option configures Init and InitLocal. An option given explicitly wins over the variable the
// launcher exported for the same setting.
type Option func(*config)

// setting is one value that an option may set explicitly; from names the option for errors.
type setting[T comparable] struct {
	v    T
	from string
}

// pick is the explicit value, else the environment's (the zero value when unset there too),
// with the name of where it came from.
func (s setting[T]) pick(env T, envName string) (T, string) {
	if s.from != "" {
		return s.v, s.from
	}
	return env, envName
}

type config struct {
	algorithm, security, dataPath setting[string]
	arena                         setting[string] // "on" or "off"
	sched                         setting[string] // sched.go
	joinTimeout, poll             setting[time.Duration]
	checksum                      setting[bool]
	links                         setting[string] // links.go
	watch                         watchConfig     // watch.go
	coll                          collective.Options
	algorithms                    *collective.Registry // WithAlgorithms; nil: the built-in ones
	getenv                        func(string) string
	logger                        *slog.Logger
}

func newConfig(opts []Option) *config {
	c := &config{getenv: os.Getenv}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// WithAlgorithm names the allreduce algorithm: ring, butterfly, binary-blocks, ps or auto, or
// with a link matrix (WithLinks) one of collective.Configurations (hier-ring, ...). Default:
// HETSYNC_COLLECTIVE, else auto (collective.DefaultAlgorithm).
func WithAlgorithm(name string) Option {
	return func(c *config) { c.algorithm = setting[string]{name, fmt.Sprintf("WithAlgorithm(%q)", name)} }
}

// WithSecurity is the security of the connections between ranks: "tls" (authenticated and
// encrypted) or "none" (trusted networks only). Default: HETSYNC_SECURITY, else tls.
func WithSecurity(s string) Option {
	return func(c *config) { c.security = setting[string]{s, fmt.Sprintf("WithSecurity(%q)", s)} }
}

// WithDataPath is the path of the collectives' bulk traffic, one of DataPaths: auto, tls,
// stream, tcp, unix, shm or cma. Default: HETSYNC_DATA_PATH, else auto (shared memory on one
// host; across hosts tcp with security none, else tls).
func WithDataPath(p string) Option {
	return func(c *config) { c.dataPath = setting[string]{p, fmt.Sprintf("WithDataPath(%q)", p)} }
}

// WithArena turns the shared-memory arena of a one-host job on (the default) or off: with it
// the collectives may read the other ranks' contributions where they wrote them instead of
// passing messages. A job has one only when every rank proved that all share its host and
// the data path may take shared memory (auto, shm, cma), and on every rank or none.
// Default: HETSYNC_ARENA (on or off), else on.
func WithArena(on bool) Option {
	v := "off"
	if on {
		v = "on"
	}
	return func(c *config) { c.arena = setting[string]{v, fmt.Sprintf("WithArena(%v)", on)} }
}

// DataPaths are the names WithDataPath, HETSYNC_DATA_PATH and --data-path take.
func DataPaths() []string { return p2p.DataPathNames() }

// WithJoinTimeout bounds how long Init waits for the other ranks. Default:
// HETSYNC_JOIN_TIMEOUT, else 60s.
func WithJoinTimeout(d time.Duration) Option {
	return func(c *config) { c.joinTimeout = setting[time.Duration]{d, fmt.Sprintf("WithJoinTimeout(%v)", d)} }
}

// WithPoll lets a waiting receiver poll its connection, and a rank waiting at the one-host
// arena's barrier its word, for up to d before it sleeps, yielding the CPU between looks: less
// latency for small messages and collectives, up to d of CPU per wait. Default: HETSYNC_POLL,
// else 0 (never).
func WithPoll(d time.Duration) Option {
	return func(c *config) { c.poll = setting[time.Duration]{d, fmt.Sprintf("WithPoll(%v)", d)} }
}

// WithChecksum adds a CRC-32C of every payload to its frame. Default: HETSYNC_CHECKSUM, else
// off (TLS protects the stream path; tcp, unix, shm and cma are for trusted hosts and networks).
func WithChecksum(on bool) Option {
	return func(c *config) { c.checksum = setting[bool]{on, fmt.Sprintf("WithChecksum(%v)", on)} }
}

// WithAlgorithms makes reg the algorithms WithAlgorithm (or HETSYNC_COLLECTIVE) names and
// auto chooses among: collective.Builtin() with a program's own added by Register. Every rank
// must hand Init the same algorithms in the same order. Default: collective.Builtin(). It
// wins over the Registry of WithCollectiveOptions.
func WithAlgorithms(reg *collective.Registry) Option {
	return func(c *config) { c.algorithms = reg }
}

// WithCollectiveOptions sets the communicator's options beyond the algorithm (segment size,
// parameter-server ranks, wire codec, re-planning). Its Algorithm, when set, counts as
// WithAlgorithm; its Replan, when not the zero value, wins over HETSYNC_REPLAN.
func WithCollectiveOptions(o collective.Options) Option {
	return func(c *config) {
		c.coll = o
		if o.Algorithm != "" {
			WithAlgorithm(o.Algorithm)(c)
		}
	}
}

// WithEnv reads the job's variables through getenv instead of os.Getenv: for tests, and for
// programs that keep a job's variables elsewhere than in their environment.
func WithEnv(getenv func(string) string) Option {
	return func(c *config) {
		if getenv != nil {
			c.getenv = getenv
		}
	}
}

// WithLogger receives the transport's reports that are not errors of Init (refused
// connections from outside the job). Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// Settings are the algorithm and transport a Comm runs with, after the options and the
// launcher's variables: what a rank got.
type Settings struct {
	// Transport is "p2p" (one process per rank, libp2p) or "mem" (InitLocal's goroutines and a
	// job of one rank).
	Transport string
	// Algorithm is the allreduce algorithm's name.
	Algorithm string
	// Security and DataPath are the p2p transport's; empty for mem.
	Security, DataPath string
	JoinTimeout, Poll  time.Duration
	Checksum           bool
	// Arena says whether the job formed with a shared-memory arena (WithArena); false for mem.
	// String says "arena=on" when it did.
	Arena bool
	// Sched is the scheduling policy this rank's threads run under once it joined, as chrt(1)
	// names it ("batch", "normal", "rr", ...); empty for mem. String names it when it is not
	// the default, normal.
	Sched string
}

// resolved is the settings of one rank with, for errors, where each came from.
type resolved struct {
	Settings
	algFrom, securityFrom, dataPathFrom string
	// arena is "on", "off" or "" (on), from arenaFrom.
	arena, arenaFrom string
}

// AlgorithmError is Init's error when the communicator cannot run the algorithm it was given
// (an unknown name, a configuration that plans from a link matrix the job has none of, or
// options that do not suit it), naming the algorithm and where it came from: a program that
// took the name from its own flag can name that flag instead.
type AlgorithmError struct {
	Rank      int
	Algorithm string
	// From is the option or variable that gave the algorithm: WithAlgorithm("ring"),
	// HETSYNC_COLLECTIVE or the default.
	From string
	Err  error
}

func (e *AlgorithmError) Error() string {
	return fmt.Sprintf("rank %d: algorithm %q from %s: %v", e.Rank, e.Algorithm, e.From, e.Err)
}

func (e *AlgorithmError) Unwrap() error { return e.Err }

// algorithmError is err of the communicator's options on rank, naming the algorithm and where
// it came from.
func (r resolved) algorithmError(rank int, err error) error {
	return &AlgorithmError{Rank: rank, Algorithm: r.Algorithm, From: r.algFrom, Err: err}
}

// arenaBytes is the p2p transport's ArenaBytes for r's arena setting: the default, or none.
func (r resolved) arenaBytes(rank int) (int64, error) {
	switch r.arena {
	case "", "on":
		return 0, nil
	case "off":
		return -1, nil
	}
	return 0, fmt.Errorf("rank %d: arena %q from %s: want on or off", rank, r.arena, r.arenaFrom)
}

// resolve takes each explicit option, else the launcher's variable.
func (c *config) resolve(env launcher.Settings) resolved {
	var r resolved
	r.Algorithm, r.algFrom = c.algorithm.pick(env.Collective, launcher.EnvCollective)
	r.Security, r.securityFrom = c.security.pick(env.Security, launcher.EnvSecurity)
	r.DataPath, r.dataPathFrom = c.dataPath.pick(env.DataPath, launcher.EnvDataPath)
	r.arena, r.arenaFrom = c.arena.pick(env.Arena, launcher.EnvArena)
	r.JoinTimeout, _ = c.joinTimeout.pick(env.JoinTimeout, "")
	r.Poll, _ = c.poll.pick(env.Poll, "")
	r.Checksum, _ = c.checksum.pick(env.Checksum, "")
	if r.Algorithm == "" {
		r.Algorithm, r.algFrom = collective.DefaultAlgorithm, "the default"
	}
	return r
}

// collectiveOptions are the communicator's options, checked against a job of size ranks
// before anything is joined. The algorithm's name is parsed here but built only once, by
// newComm, when the link matrix that a configuration plans from (hier-ring, ring/interleaved)
// is known: measured, or read, as the job forms.
func (c *config) collectiveOptions(r resolved, rank, size int) (collective.Options, error) {
	o := c.coll
	o.Algorithm = r.Algorithm
	if c.algorithms != nil {
		o.Registry = c.algorithms
	}
	if v := strings.TrimSpace(c.getenv(collective.EnvReplan)); v != "" && o.Replan == (collective.ReplanOptions{}) {
		replan, err := collective.ParseReplanOptions(v)
		if err != nil {
			return o, fmt.Errorf("rank %d: %s: %w", rank, collective.EnvReplan, err)
		}
		o.Replan = replan
	}
	if err := o.Check(size); err != nil {
		return o, r.algorithmError(rank, err)
	}
	for _, d := range []setting[time.Duration]{c.joinTimeout, c.poll} {
		if d.v < 0 {
			return o, fmt.Errorf("rank %d: %s: must not be negative", rank, d.from)
		}
	}
	return o, nil
}

// String is the settings as key=value pairs, e.g. "transport=p2p algorithm=ring security=none
// data-path=tcp".
func (s Settings) String() string {
	out := "transport=" + s.Transport + " algorithm=" + s.Algorithm
	if s.Transport == "mem" {
		return out
	}
	out += " security=" + s.Security + " data-path=" + s.DataPath
	if s.Checksum {
		out += " checksum=crc32c"
	}
	if s.Poll > 0 {
		out += " poll=" + s.Poll.String()
	}
	if s.Arena {
		out += " arena=on"
	}
	if s.Sched != "" && s.Sched != "normal" {
		out += " sched=" + s.Sched
	}
	return out
}
