package p2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// Security choices for the libp2p connections.
const (
	SecurityTLS  = "tls"  // libp2p TLS 1.3: peer identities authenticated, traffic encrypted
	SecurityNone = "none" // plaintext; peer IDs are exchanged but not authenticated
)

// Data paths for the bulk (collective) traffic between two ranks.
const (
	DataPathAuto   = "auto"   // shm on a proven same host; else tcp when Security is none, else tls
	DataPathStream = "stream" // a libp2p stream over the (secure) libp2p connection
	DataPathTCP    = "tcp"    // a plain TCP connection beside libp2p, token-authenticated
	DataPathTLS    = "tls"    // TLS 1.3 over a direct TCP connection, both ends proven by their rank keys
	DataPathUnix   = "unix"   // a Unix socket between ranks on a proven same host, token-authenticated
	DataPathShm    = "shm"    // shared-memory rings between ranks on a proven same host, set up over unix
	// DataPathCMA is "shm" whose large writes the reader copies straight out of the writer's
	// buffer (process_vm_readv) in each direction where the kernel lets it, else the rings.
	DataPathCMA = "cma"
)

// DataPathNames are the values Config.DataPath takes: the one list that the command line's
// flags, the options' validation and the documentation take theirs from.
func DataPathNames() []string {
	return []string{DataPathAuto, DataPathTLS, DataPathStream, DataPathTCP, DataPathUnix, DataPathShm, DataPathCMA}
}

// DefaultLinger is how long a rank's Close waits for its peers to read what it sent last.
const DefaultLinger = 5 * time.Second

// DefaultJoinTimeout bounds Join when Config.JoinTimeout is zero.
const DefaultJoinTimeout = 60 * time.Second

// Config describes one rank of a libp2p job. The zero value of every optional field selects
// the documented default.
type Config struct {
	Rank, Size int
	// LocalRank is the rank's index among the ranks on its host. It is carried in the peer
	// table for the layers above (device selection); the transport itself does not use it.
	LocalRank int
	// Rendezvous is host:port where rank 0 listens (its libp2p TCP listen address). Rank 0 may
	// use port 0 only through the package's tests.
	Rendezvous string
	// Secret is the per-job secret (HETSYNC_JOB_SECRET). Every peer identity is derived from it.
	Secret string
	// Security is "tls" (default) or "none".
	Security string
	// DataPath is one of DataPathNames ("auto", the default, "tls", "stream", "tcp", "unix",
	// "shm", "cma"). "unix",
	// "shm" and "cma" need every pair of ranks on one proven host; Join fails naming the pair
	// and why otherwise.
	DataPath string
	// SingleCopyMin and SingleCopyMax bound, with DataPath "cma", the writes that go as a
	// single copy; the others take the rings. 0 means shm.DefaultSingleCopyMin and no upper
	// bound.
	SingleCopyMin, SingleCopyMax int
	// ShmHostBudget bounds, in bytes, the shared-memory rings of all pairs of this rank's
	// host: the rank sizes the rings of the segments it creates with shm.HostRingSize from
	// the number of ranks it proved on its host. 0 means shm.DefaultHostRingBudget.
	ShmHostBudget int64
	// ArenaBytes sizes the arena (transport.Arena) of a job whose ranks all proved one host
	// and whose DataPath may take shared memory ("auto", "shm", "cma"): 0 means
	// DefaultArenaBytes (less when /dev/shm has less room: fitArenaBytes), a negative value
	// no arena. The ranks agree while the job forms, so
	// the job has one only when every rank wants one and mapped rank 0's (see arena.go).
	ArenaBytes int64
	// Host is the IP this rank listens on and advertises. Default: 127.0.0.1 when Rendezvous is
	// a loopback address, else the IP of the interface that routes to the rendezvous host.
	Host string
	// Hostname, when set (HETSYNC_HOSTNAME), names this rank's host, and can only part ranks:
	// two ranks that set different Hostnames never share a host. Whether ranks share a host is
	// otherwise proven, never taken from a name: both must see one file in /dev/shm and run in
	// one network namespace (see the package doc). Ranks with the same Hostname that cannot
	// prove it are on different hosts. Default: empty, the proof alone decides.
	Hostname string
	// JoinTimeout bounds the whole of Join (rendezvous, and the data connections it opens),
	// and each data connection opened later, when a call first needs a peer. Default 60s.
	JoinTimeout time.Duration
	// Stream configures the framing over each per-peer connection. The zero value selects
	// transport.DefaultStreamOptions() without payload checksums (TLS already protects the
	// stream path; tcp and unix are for trusted networks); set Checksum to have them.
	Stream transport.StreamOptions
	// PeerTimeout is how long a peer may send no heartbeat on the control path before this
	// rank fails it (transport.UnresponsiveError): its pending and later receives fail naming
	// it. 0 means DefaultPeerTimeout, a negative value no heartbeats (HETSYNC_PEER_TIMEOUT).
	PeerTimeout time.Duration
	// Logger receives reports that are not errors of Join itself (refused direct-path hellos,
	// refused rendezvous registrations). Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first problem with c, naming the offending field.
func (c Config) Validate() error {
	if c.Size < 1 {
		return fmt.Errorf("p2p config: Size %d: must be at least 1", c.Size)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return fmt.Errorf("p2p config: Rank %d out of range [0, %d)", c.Rank, c.Size)
	}
	if c.LocalRank < 0 {
		return fmt.Errorf("p2p config: rank %d: LocalRank %d is negative", c.Rank, c.LocalRank)
	}
	if c.Secret == "" {
		return fmt.Errorf("p2p config: rank %d: Secret is empty (set HETSYNC_JOB_SECRET; every rank of the job must use the same one)", c.Rank)
	}
	if c.Rendezvous == "" {
		return fmt.Errorf("p2p config: rank %d: Rendezvous is empty (want host:port where rank 0 listens)", c.Rank)
	}
	host, port, err := net.SplitHostPort(c.Rendezvous)
	if err != nil {
		return fmt.Errorf("p2p config: rank %d: Rendezvous %q: %v (want host:port)", c.Rank, c.Rendezvous, err)
	}
	if host == "" {
		return fmt.Errorf("p2p config: rank %d: Rendezvous %q has no host", c.Rank, c.Rendezvous)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("p2p config: rank %d: Rendezvous %q: port %q is not a number in [0, 65535]", c.Rank, c.Rendezvous, port)
	}
	switch c.Security {
	case "", SecurityTLS, SecurityNone:
	default:
		return fmt.Errorf("p2p config: rank %d: Security %q unknown (want %q or %q)", c.Rank, c.Security, SecurityTLS, SecurityNone)
	}
	if c.DataPath != "" && !slices.Contains(DataPathNames(), c.DataPath) {
		return fmt.Errorf("p2p config: rank %d: DataPath %q unknown (want one of %s)", c.Rank, c.DataPath, strings.Join(DataPathNames(), ", "))
	}
	if c.SingleCopyMin < 0 || c.SingleCopyMin > 1<<30 || c.SingleCopyMax < 0 || c.SingleCopyMax > 1<<30 {
		return fmt.Errorf("p2p config: rank %d: SingleCopyMin %d and SingleCopyMax %d must be in [0, %d] (0 = default)",
			c.Rank, c.SingleCopyMin, c.SingleCopyMax, 1<<30)
	}
	if c.ShmHostBudget < 0 {
		return fmt.Errorf("p2p config: rank %d: ShmHostBudget %d is negative (0 = default)", c.Rank, c.ShmHostBudget)
	}
	if c.ArenaBytes > shm.MaxArenaBytes {
		return fmt.Errorf("p2p config: rank %d: ArenaBytes %d exceeds %d (0 = default, negative = none)", c.Rank, c.ArenaBytes, int64(shm.MaxArenaBytes))
	}
	if c.Host != "" {
		ip := net.ParseIP(c.Host)
		if ip == nil {
			return fmt.Errorf("p2p config: rank %d: Host %q is not an IP address", c.Rank, c.Host)
		}
		if ip.IsUnspecified() {
			return fmt.Errorf("p2p config: rank %d: Host %q is unspecified; give the IP that peers can reach", c.Rank, c.Host)
		}
	}
	if c.JoinTimeout < 0 {
		return fmt.Errorf("p2p config: rank %d: JoinTimeout %v is negative", c.Rank, c.JoinTimeout)
	}
	return nil
}

// withDefaults returns c with every optional field filled in. It resolves the rendezvous host
// and, when needed, the local interface that routes to it.
func (c Config) withDefaults(ctx context.Context) (Config, error) {
	if c.Security == "" {
		c.Security = SecurityTLS
	}
	if c.DataPath == "" {
		c.DataPath = DataPathAuto
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Host == "" {
		ip, err := routeTo(ctx, c.Rendezvous)
		if err != nil {
			return c, fmt.Errorf("rank %d: Host not set and no local address routes to rendezvous %s: %w", c.Rank, c.Rendezvous, err)
		}
		c.Host = ip.String()
	}
	return c, nil
}

// resolveRendezvous returns the TCP address of rank 0.
func resolveRendezvous(ctx context.Context, rendezvous string) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(rendezvous)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip != nil {
		return &net.TCPAddr{IP: ip, Port: p}, nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	// Prefer IPv4: rank 0 listens on one address family only.
	for _, a := range ips {
		if a.IP.To4() != nil {
			return &net.TCPAddr{IP: a.IP, Port: p}, nil
		}
	}
	if len(ips) == 0 {
		return nil, errors.New("host name has no addresses")
	}
	return &net.TCPAddr{IP: ips[0].IP, Port: p}, nil
}

// routeTo returns the local IP that reaches the rendezvous host: loopback for a loopback
// rendezvous, else the source address the kernel picks for it. No packet is sent.
func routeTo(ctx context.Context, rendezvous string) (net.IP, error) {
	addr, err := resolveRendezvous(ctx, rendezvous)
	if err != nil {
		return nil, err
	}
	if addr.IP.IsLoopback() {
		if addr.IP.To4() != nil {
			return net.IPv4(127, 0, 0, 1).To4(), nil
		}
		return net.IPv6loopback, nil
	}
	port := addr.Port
	if port == 0 {
		port = 9 // any port will do: a UDP "connect" only consults the routing table
	}
	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: addr.IP, Port: port})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP, nil
}
