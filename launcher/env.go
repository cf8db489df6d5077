package launcher

import (
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Environment variables that a launcher sets in every rank.
const (
	EnvRank       = "HETSYNC_RANK"
	EnvWorldSize  = "HETSYNC_WORLD_SIZE"
	EnvLocalRank  = "HETSYNC_LOCAL_RANK"
	EnvLocalSize  = "HETSYNC_LOCAL_SIZE"
	EnvRendezvous = "HETSYNC_RENDEZVOUS"
	EnvSecret     = "HETSYNC_JOB_SECRET"
)

// RankEnv is what a rank learns from its launcher.
type RankEnv struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// Rendezvous is host:port of rank 0's rendezvous listener.
	Rendezvous string
	// Secret is the per-job secret (hex) from which peer identities are derived.
	Secret string
}

// Validate checks that the values are consistent.
func (e RankEnv) Validate() error {
	if e.Size < 1 {
		return fmt.Errorf("%s=%d: world size must be at least 1", EnvWorldSize, e.Size)
	}
	if e.Rank < 0 || e.Rank >= e.Size {
		return fmt.Errorf("%s=%d: rank must be in [0, %d) (%s=%d)", EnvRank, e.Rank, e.Size, EnvWorldSize, e.Size)
	}
	if e.LocalSize < 1 || e.LocalSize > e.Size {
		return fmt.Errorf("%s=%d: local size must be in [1, %d] (%s=%d)", EnvLocalSize, e.LocalSize, e.Size, EnvWorldSize, e.Size)
	}
	if e.LocalRank < 0 || e.LocalRank >= e.LocalSize {
		return fmt.Errorf("%s=%d: local rank must be in [0, %d) (%s=%d)", EnvLocalRank, e.LocalRank, e.LocalSize, EnvLocalSize, e.LocalSize)
	}
	host, port, err := net.SplitHostPort(e.Rendezvous)
	if err != nil {
		return fmt.Errorf("%s=%q: want host:port: %v", EnvRendezvous, e.Rendezvous, err)
	}
	if host == "" {
		return fmt.Errorf("%s=%q: host is empty", EnvRendezvous, e.Rendezvous)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s=%q: port %q is not a number in [1, 65535]", EnvRendezvous, e.Rendezvous, port)
	}
	if e.Secret == "" {
		return fmt.Errorf("%s is empty: the launcher must give every rank the job secret", EnvSecret)
	}
	if _, err := hex.DecodeString(e.Secret); err != nil {
		return fmt.Errorf("%s: not a hex string: %v", EnvSecret, err)
	}
	return nil
}

// Environ returns the variables that carry e to a rank process, as "KEY=value" strings.
func (e RankEnv) Environ() []string {
	return []string{
		EnvRank + "=" + strconv.Itoa(e.Rank),
		EnvWorldSize + "=" + strconv.Itoa(e.Size),
		EnvLocalRank + "=" + strconv.Itoa(e.LocalRank),
		EnvLocalSize + "=" + strconv.Itoa(e.LocalSize),
		EnvRendezvous + "=" + e.Rendezvous,
		EnvSecret + "=" + e.Secret,
		"RANK=" + strconv.Itoa(e.Rank),
		"WORLD_SIZE=" + strconv.Itoa(e.Size),
		"LOCAL_RANK=" + strconv.Itoa(e.LocalRank),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(e.LocalSize),
	}
}

// RankEnvFromEnviron reads the rank environment through getenv (os.Getenv in a real rank). The
// bool is false, with no error, when HETSYNC_RANK is unset: the process was not started by a
// launcher. Otherwise every variable must be present and well formed.
func RankEnvFromEnviron(getenv func(string) string) (RankEnv, bool, error) {
	if strings.TrimSpace(getenv(EnvRank)) == "" {
		return RankEnv{}, false, nil
	}
	var e RankEnv
	ints := []struct {
		name string
		dst  *int
	}{{EnvRank, &e.Rank}, {EnvWorldSize, &e.Size}, {EnvLocalRank, &e.LocalRank}, {EnvLocalSize, &e.LocalSize}}
	for _, v := range ints {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			return RankEnv{}, true, fmt.Errorf("%s is set but %s is missing", EnvRank, v.name)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return RankEnv{}, true, fmt.Errorf("%s=%q: not an integer", v.name, s)
		}
		*v.dst = n
	}
	e.Rendezvous = strings.TrimSpace(getenv(EnvRendezvous))
	if e.Rendezvous == "" {
		return RankEnv{}, true, fmt.Errorf("%s is set but %s is missing", EnvRank, EnvRendezvous)
	}
	e.Secret = strings.TrimSpace(getenv(EnvSecret))
	if err := e.Validate(); err != nil {
		return RankEnv{}, true, err
	}
	return e, true, nil
}
