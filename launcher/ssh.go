package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHConfig says how to reach the hosts of a multi-host job. The zero value of every field
// selects the documented default.
type SSHConfig struct {
	// User is the login user on every host without its own user@; default: the host's User
	// in the ssh config, else the current user.
	User string
	// Port is the SSH port of every host; default: the host's Port in the ssh config, else 22.
	Port int
	// IdentityFiles are private keys to offer, besides the host's IdentityFile lines in the ssh
	// config. Default, when neither names one: whichever of ~/.ssh/id_ed25519, id_ecdsa and
	// id_rsa exist. Keys with a passphrase are skipped: load them into ssh-agent.
	IdentityFiles []string
	// ConfigFile is the ssh_config(5) file whose Host blocks say how to reach each host
	// (HostName, User, Port, IdentityFile, IdentitiesOnly, UserKnownHostsFile, ProxyJump), as
	// `ssh -F FILE` reads it. Empty: ~/.ssh/config and then /etc/ssh/ssh_config, those that
	// exist, as ssh reads them; "none": no file.
	ConfigFile string
	// NoAgent stops the keys of the agent at SSH_AUTH_SOCK from being offered.
	NoAgent bool
	// KnownHostsFiles are checked for every host key. Default: the host's UserKnownHostsFile
	// in the ssh config, else ~/.ssh/known_hosts, and /etc/ssh/ssh_known_hosts, those that
	// exist. An unknown or changed host key is refused.
	KnownHostsFiles []string
	// InsecureSkipHostKey accepts any host key (a warning goes to Log): only for throw-away
	// test networks, since anyone on the path can then impersonate the hosts.
	InsecureSkipHostKey bool
	// ConnectTimeout bounds the TCP connection and the SSH handshake; default 10 s.
	ConnectTimeout time.Duration
	// KeepAlive is how often an idle connection is probed, so that a dead host fails its
	// ranks instead of hanging the job; default 5 s.
	KeepAlive time.Duration
	// RemoteBin replaces the command (Argv[0]) on remote hosts; empty: the same as locally.
	RemoteBin string
	// RemoteDir is the working directory on remote hosts, which must exist there. Empty: the
	// rank's Dir (or the launcher's working directory) when it exists there, else the login
	// directory.
	RemoteDir string
	// Forward names variables of the rank's environment that remote ranks get besides the
	// rank variables and every HETSYNC_* variable (the -x flag). Local ranks get the whole
	// environment.
	Forward []string
	// SupervisorCommand runs the host supervisor (Supervise) on every remote host: the path of
	// hetsync there and its hidden subcommand. Default: this executable's path and
	// "_supervise", which is right when the launcher is hetsync installed at the same place
	// everywhere.
	SupervisorCommand []string
	// Log receives warnings (insecure host keys, skipped identity files). Nil discards.
	Log io.Writer
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the configuration.
func (c *SSHConfig) Validate() error {
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("--ssh-port %d: want a port in [1, 65535]", c.Port)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("--ssh-timeout %v is negative", c.ConnectTimeout)
	}
	if c.KeepAlive < 0 {
		return fmt.Errorf("SSH keep-alive %v is negative", c.KeepAlive)
	}
	for _, v := range c.Forward {
		if !envName.MatchString(v) {
			return fmt.Errorf("-x %q: not a variable name", v)
		}
	}
	if c.InsecureSkipHostKey && len(c.KnownHostsFiles) > 0 {
		return errors.New("--ssh-insecure-skip-hostkey and --ssh-known-hosts contradict each other")
	}
	return nil
}

// SSHSpawner starts the ranks of a multi-host job: over SSH on remote hosts, as local children
// (LocalSpawner) on the host named "localhost". It keeps one SSH connection per host and one
// session on it, which runs hetsync's host supervisor (Supervise): the supervisor starts every
// rank of its host, each in its own process group, forwards their output and exits, and stops
// them when the launcher asks, when a rank exits (what it left in its group), and when the
// connection to the launcher is lost, so a launcher that dies, even by SIGKILL, leaves no rank
// behind. One session per host, whatever its rank count, is what lets a host whose sshd keeps
// OpenSSH's default limit of 10 sessions per connection run 16 or 64 ranks. The ranks'
// environment travels inside the session, not on a command line, so the job secret never
// shows in the remote host's process list.
type SSHSpawner struct {
	cfg       SSHConfig
	hosts     []Host
	placement []Slot
	local     LocalSpawner
	log       io.Writer

	mu      sync.Mutex
	clients map[int]*ssh.Client
	dialing map[int]*dialResult
	// sessions are the hosts' supervisors; each slot's lock makes one start per host while
	// other hosts start theirs.
	sessMu   sync.Mutex
	sessions map[int]*sessionSlot
	// jumps are the connections to ProxyJump hosts that the hosts' connections run through.
	jumps []*ssh.Client
	// targets are the remote hosts as resolved through the ssh config and the flags.
	targets map[int]*sshTarget
	agentC  net.Conn
	keys    *keyring
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// NewSSHSpawner checks cfg and prepares the keys and the host-key check; it connects to no
// host yet (Connect does). placement maps every rank to a host (Place).
func NewSSHSpawner(cfg SSHConfig, hosts []Host, placement []Slot) (*SSHSpawner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for r, s := range placement {
		if s.Host < 0 || s.Host >= len(hosts) {
			return nil, fmt.Errorf("rank %d placed on host #%d of %d", r, s.Host, len(hosts))
		}
	}
	s := &SSHSpawner{cfg: cfg, hosts: hosts, placement: placement, log: cfg.Log,
		clients: map[int]*ssh.Client{}, dialing: map[int]*dialResult{}, sessions: map[int]*sessionSlot{},
		targets: map[int]*sshTarget{}, stop: make(chan struct{})}
	if s.log == nil {
		s.log = io.Discard
	}
	if s.cfg.ConnectTimeout == 0 {
		s.cfg.ConnectTimeout = 10 * time.Second
	}
	if s.cfg.KeepAlive == 0 {
		s.cfg.KeepAlive = 5 * time.Second
	}
	if len(s.cfg.SupervisorCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this executable to run as the hosts' supervisor: %w", err)
		}
		s.cfg.SupervisorCommand = []string{exe, "_supervise"}
	}
	if !s.anyRemote() {
		return s, nil
	}
	if err := s.resolveTargets(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

func (s *SSHSpawner) anyRemote() bool {
	for _, sl := range s.placement {
		if !s.hosts[sl.Host].Local() {
			return true
		}
	}
	return false
}

// Close closes every SSH connection (ranks still running on them are stopped by their
// supervisors) and the agent connection.
func (s *SSHSpawner) Close() error {
	s.sessMu.Lock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.sessMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	clients := s.clients
	s.clients = map[int]*ssh.Client{}
	s.mu.Unlock()
	for _, slot := range s.sessions {
		if slot.h != nil {
			slot.h.close()
		}
	}
	s.sessMu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	s.mu.Lock()
	jumps := s.jumps
	s.jumps = nil
	s.mu.Unlock()
	for i := len(jumps) - 1; i >= 0; i-- {
		jumps[i].Close()
	}
	if s.agentC != nil {
		s.agentC.Close()
	}
	s.wg.Wait()
	return nil
}

// Spawn starts rank spec.Rank on its host: through that host's supervisor, which the first
// rank of the host starts.
func (s *SSHSpawner) Spawn(ctx context.Context, spec ProcSpec) (Process, error) {
	if spec.Rank < 0 || spec.Rank >= len(s.placement) {
		return nil, fmt.Errorf("rank %d: not placed on any host (%d placed)", spec.Rank, len(s.placement))
	}
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("rank %d: empty command", spec.Rank)
	}
	hi := s.placement[spec.Rank].Host
	if s.hosts[hi].Local() {
		return s.local.Spawn(ctx, spec)
	}
	hostName := s.hosts[hi].Name
	env, err := s.remoteEnv(spec.Env)
	if err != nil {
		return nil, fmt.Errorf("rank %d on host %s: %w", spec.Rank, hostName, err)
	}
	h, err := s.session(ctx, hi)
	if err != nil {
		return nil, err
	}
	argv := append([]string(nil), spec.Argv...)
	if s.cfg.RemoteBin != "" {
		argv[0] = s.cfg.RemoteBin
	}
	dir, must := s.cfg.RemoteDir, s.cfg.RemoteDir != ""
	if !must {
		dir = spec.Dir
		if dir == "" {
			dir, _ = os.Getwd()
		}
	}
	p, err := h.start(spec.Rank, startRequest{Argv: argv, Env: env, Dir: dir, MustDir: must, Host: hostName}, spec.Stdout, spec.Stderr)
	if err != nil {
		return nil, fmt.Errorf("rank %d on host %s: %w", spec.Rank, hostName, err)
	}
	return p, nil
}

// supervisorStartFactor times ConnectTimeout bounds how long a host's supervisor may take to
// say hello: starting a program is slower than a handshake on a host whose cores are all busy.
const supervisorStartFactor = 3

// sessionSlot holds one host's supervisor session once it is started.
type sessionSlot struct {
	mu sync.Mutex
	h  *hostSession
}

// session returns the supervisor session of host hi, starting it once.
func (s *SSHSpawner) session(ctx context.Context, hi int) (*hostSession, error) {
	c, err := s.client(ctx, hi)
	if err != nil {
		return nil, err
	}
	s.sessMu.Lock()
	slot := s.sessions[hi]
	if slot == nil {
		slot = &sessionSlot{}
		s.sessions[hi] = slot
	}
	s.sessMu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.h != nil {
		return slot.h, nil
	}
	h, err := openHostSession(ctx, c, s.hosts[hi].Name, s.cfg.SupervisorCommand, supervisorStartFactor*s.cfg.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.closed {
		h.close()
		h.sess.Close()
		return nil, errors.New("ssh spawner is closed")
	}
	slot.h = h
	return h, nil
}

// remoteEnv picks from a rank's full environment what a remote rank gets: the rank variables
// (torchrun's names included), every HETSYNC_* variable and the forwarded ones.
func (s *SSHSpawner) remoteEnv(full []string) ([]string, error) {
	keep := map[string]bool{"RANK": true, "WORLD_SIZE": true, "LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true,
		"MASTER_ADDR": true, "MASTER_PORT": true}
	for _, v := range s.cfg.Forward {
		keep[v] = true
	}
	var env []string
	for _, kv := range full {
		k, v, _ := strings.Cut(kv, "=")
		if !keep[k] && !strings.HasPrefix(k, "HETSYNC_") {
			continue
		}
		if !envName.MatchString(k) {
			continue
		}
		if strings.ContainsAny(v, "\n\x00") {
			return nil, fmt.Errorf("variable %s: a value with a newline cannot be passed to a remote rank", k)
		}
		env = append(env, kv)
	}
	return env, nil
}

// shellQuote quotes s for POSIX sh (and csh, fish): in single quotes, each embedded quote
// closed, escaped with a backslash and reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sshSignals maps the signal names of RFC 4254 section 6.10 (and OpenSSH's) to numbers.
var sshSignals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2, "BUS": syscall.SIGBUS, "TRAP": syscall.SIGTRAP, "XCPU": syscall.SIGXCPU,
	"XFSZ": syscall.SIGXFSZ, "SYS": syscall.SIGSYS,
}
