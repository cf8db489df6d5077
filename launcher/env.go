package launcher

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
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
	// Optional: the rank's host name for same-host detection (multi-host launches set it to
	// the host's name in the host list), the interface whose address the rank advertises, or
	// that address itself.
	EnvHostname = "HETSYNC_HOSTNAME"
	EnvIface    = "HETSYNC_IFACE"
	EnvHost     = "HETSYNC_HOST"
)

// RankEnv is what a rank learns from its launcher.
type RankEnv struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// Rendezvous is host:port of rank 0's rendezvous listener.
	Rendezvous string
	// Secret is the per-job secret (hex) from which peer identities are derived.
	Secret string
	// Hostname, when set, names the rank's host: ranks with different names never share one.
	// Ranks with equal names still have to prove it (see transport/p2p, Config.Hostname).
	Hostname string
	// Iface names the network interface whose address the rank advertises (launcher side).
	Iface string
	// Host is the IP the rank listens on and advertises: HETSYNC_HOST, or the address of
	// HETSYNC_IFACE, resolved by RankEnvFromEnviron on the rank's machine. Empty: the
	// transport picks the address that routes to the rendezvous host.
	Host string
	// Settings are the job's algorithm and transport choices (HETSYNC_SECURITY, ...).
	Settings Settings
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
		return fmt.Errorf("%s is empty (and %s unset): the launcher must give every rank the job secret", EnvSecret, EnvSecretFile)
	}
	return CheckSecret(EnvSecret, e.Secret)
}

// MinSecretBytes is the shortest job secret a rank or a launcher accepts: every rank's
// identity key is derived from the secret, so whoever guesses it can join the job as any rank.
const MinSecretBytes = 16

// CheckSecret checks a job secret (hex) that came from name (a variable or a file).
func CheckSecret(name, secret string) error {
	b, err := hex.DecodeString(secret)
	if err != nil {
		return fmt.Errorf("%s: not a hex string: %v", name, err)
	}
	if len(b) < MinSecretBytes {
		return fmt.Errorf("%s: too short (%d hex digits): a job secret authenticates every rank and needs at least %d random bytes (%d hex digits; make one with openssl rand -hex 32)",
			name, len(secret), MinSecretBytes, 2*MinSecretBytes)
	}
	return nil
}

// Environ returns the variables that carry e to a rank process, as "KEY=value" strings.
func (e RankEnv) Environ() []string {
	vars := []string{
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
	// torchrun's names for the rendezvous, for programs that read them; hetsync's own ranks
	// read HETSYNC_RENDEZVOUS first.
	if host, port, err := net.SplitHostPort(e.Rendezvous); err == nil {
		vars = append(vars, "MASTER_ADDR="+host, "MASTER_PORT="+port)
	}
	if e.Hostname != "" {
		vars = append(vars, EnvHostname+"="+e.Hostname)
	}
	if e.Iface != "" {
		vars = append(vars, EnvIface+"="+e.Iface)
	}
	if e.Host != "" {
		vars = append(vars, EnvHost+"="+e.Host)
	}
	return append(vars, e.Settings.Environ()...)
}

// RankEnvFromEnviron reads the rank environment through getenv (os.Getenv in a real rank).
// When HETSYNC_RANK is unset it adopts the environment of Slurm, Open MPI or torchrun (see
// AdoptRankEnv). The bool is false, with no error, when no launcher started the process.
// Otherwise every variable must be present and well formed, the job's Settings included.
func RankEnvFromEnviron(getenv func(string) string) (RankEnv, bool, error) {
	if strings.TrimSpace(getenv(EnvRank)) == "" {
		return AdoptRankEnv(getenv, os.ReadFile)
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
	secret, from, err := jobSecret(func(k string) string { return strings.TrimSpace(getenv(k)) }, os.ReadFile)
	if err != nil {
		return RankEnv{}, true, err
	}
	e.Secret = secret
	if secret != "" {
		// Before Validate, which names HETSYNC_JOB_SECRET: a bad secret read from a file is
		// reported with the file's name.
		if err := CheckSecret(from, secret); err != nil {
			return RankEnv{}, true, err
		}
	}
	if err := e.Validate(); err != nil {
		return RankEnv{}, true, err
	}
	if err := e.readOptional(getenv); err != nil {
		return RankEnv{}, true, err
	}
	return e, true, nil
}
