package launcher

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Variables that carry the job's settings to every rank, so that a program forming its job
// with hetsync.Init gets the algorithm and the transport the job was launched with. A variable
// that is unset (or empty) leaves the program's own default.
const (
	EnvCollective  = "HETSYNC_COLLECTIVE"
	EnvSecurity    = "HETSYNC_SECURITY"
	EnvDataPath    = "HETSYNC_DATA_PATH"
	EnvJoinTimeout = "HETSYNC_JOIN_TIMEOUT"
	EnvPoll        = "HETSYNC_POLL"
	EnvChecksum    = "HETSYNC_CHECKSUM"
	EnvLinks       = "HETSYNC_LINKS"
	EnvArena       = "HETSYNC_ARENA"
	EnvSched       = "HETSYNC_SCHED"
	EnvRunDir      = "HETSYNC_RUN_DIR"
)

// Settings are the job-wide choices a launcher passes to every rank. Zero fields are not
// exported and read back as unset. The launcher only carries them: their meaning and the
// check of their values belong to the transport and the collectives (the ranks' side).
type Settings struct {
	// Collective is the allreduce algorithm's name (HETSYNC_COLLECTIVE).
	Collective string
	// Security is the libp2p channel security, "tls" or "none" (HETSYNC_SECURITY).
	Security string
	// DataPath is the bulk data path, one of hetsync.DataPaths: auto, tls, stream, tcp, unix,
	// shm or cma (HETSYNC_DATA_PATH).
	DataPath string
	// JoinTimeout bounds how long ranks wait for each other (HETSYNC_JOIN_TIMEOUT, a Go
	// duration such as 90s).
	JoinTimeout time.Duration
	// Poll is how long a waiting receiver polls its connection (HETSYNC_POLL, a duration).
	Poll time.Duration
	// Checksum adds a CRC-32C to every payload frame (HETSYNC_CHECKSUM=1).
	Checksum bool
	// Links is where the ranks' link matrix comes from: off, measure, or a matrix file that
	// every rank reads (HETSYNC_LINKS).
	Links string
	// Arena is "off" to form a one-host job without its shared-memory arena, "on" (or empty)
	// for the default (HETSYNC_ARENA).
	Arena string
	// Sched is the scheduling policy every rank puts its threads under: batch or inherit
	// (HETSYNC_SCHED).
	Sched string
	// RunDir is the run directory that rank 0's hetsync.Session writes when the program names
	// none (`hetsync launch --out`, HETSYNC_RUN_DIR), on rank 0's host.
	RunDir string
}

// Environ returns the set fields as "KEY=value" strings.
func (s Settings) Environ() []string {
	var vars []string
	add := func(k, v string) {
		if v != "" {
			vars = append(vars, k+"="+v)
		}
	}
	add(EnvCollective, s.Collective)
	add(EnvSecurity, s.Security)
	add(EnvDataPath, s.DataPath)
	if s.JoinTimeout != 0 {
		add(EnvJoinTimeout, s.JoinTimeout.String())
	}
	if s.Poll != 0 {
		add(EnvPoll, s.Poll.String())
	}
	if s.Checksum {
		add(EnvChecksum, "1")
	}
	add(EnvLinks, s.Links)
	add(EnvArena, s.Arena)
	add(EnvSched, s.Sched)
	add(EnvRunDir, s.RunDir)
	return vars
}

// SettingsFromEnviron reads the settings through getenv (os.Getenv in a real rank). A
// malformed duration or boolean is an error naming the variable.
func SettingsFromEnviron(getenv func(string) string) (Settings, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	s := Settings{Collective: get(EnvCollective), Security: get(EnvSecurity), DataPath: get(EnvDataPath), Links: get(EnvLinks),
		Arena: get(EnvArena), Sched: get(EnvSched), RunDir: getenv(EnvRunDir)}
	durations := []struct {
		name string
		dst  *time.Duration
	}{{EnvJoinTimeout, &s.JoinTimeout}, {EnvPoll, &s.Poll}}
	for _, d := range durations {
		v := get(d.name)
		if v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil || x < 0 {
			return Settings{}, fmt.Errorf("%s=%q: want a non-negative duration such as 90s", d.name, v)
		}
		*d.dst = x
	}
	if v := get(EnvChecksum); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Settings{}, fmt.Errorf("%s=%q: want 1 or 0", EnvChecksum, v)
		}
		s.Checksum = b
	}
	return s, nil
}
