package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/user"
	"regexp"
	"strconv"
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

type dialResult struct {
	done   chan struct{}
	client *ssh.Client
	err    error
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

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	Addr, Files string
	Key         ssh.PublicKey
	// Mismatch is the known key (file:line: key) when the host's key changed; empty when the
	// host is not known at all.
	Mismatch string
}

func (e *HostKeyError) Error() string {
	if e.Mismatch != "" {
		return fmt.Sprintf("the %s host key of %s does NOT match the known one (%s): possible man-in-the-middle attack; refusing to connect",
			e.Key.Type(), e.Addr, e.Mismatch)
	}
	host, port, _ := net.SplitHostPort(e.Addr)
	return fmt.Sprintf("host key of %s (%s %s) is not in known_hosts (%s); refusing to connect: add it with "+
		"`ssh-keyscan -p %s %s >> ~/.ssh/known_hosts` after checking its fingerprint, or pass --ssh-insecure-skip-hostkey on a trusted test network",
		e.Addr, e.Key.Type(), ssh.FingerprintSHA256(e.Key), e.Files, port, host)
}

// HostError is a failure to reach or log in to one host.
type HostError struct {
	Host string // user@host:port
	Err  error
}

func (e *HostError) Error() string { return fmt.Sprintf("ssh to host %s: %v", e.Host, e.Err) }
func (e *HostError) Unwrap() error { return e.Err }

// Connect opens the SSH connection to every remote host of the placement and starts its
// supervisor, in parallel. The error names every host that could not be reached, refused the
// login or has no usable hetsync.
func (s *SSHSpawner) Connect(ctx context.Context) error {
	seen := map[int]bool{}
	var hs []int
	for _, sl := range s.placement {
		if !seen[sl.Host] && !s.hosts[sl.Host].Local() {
			seen[sl.Host] = true
			hs = append(hs, sl.Host)
		}
	}
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, hi := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.session(ctx, hi)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// client returns the connection to host hi, dialing it once.
func (s *SSHSpawner) client(ctx context.Context, hi int) (*ssh.Client, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("ssh spawner is closed")
	}
	if c := s.clients[hi]; c != nil {
		s.mu.Unlock()
		return c, nil
	}
	d := s.dialing[hi]
	if d == nil {
		d = &dialResult{done: make(chan struct{})}
		s.dialing[hi] = d
		s.mu.Unlock()
		d.client, d.err = s.dial(ctx, hi)
		s.mu.Lock()
		if d.err == nil {
			if s.closed {
				d.client.Close()
				d.client, d.err = nil, errors.New("ssh spawner is closed")
			} else {
				s.clients[hi] = d.client
				s.wg.Add(1)
				go s.keepAlive(d.client)
			}
		} else {
			delete(s.dialing, hi) // a later Spawn may try again
		}
		close(d.done)
		s.mu.Unlock()
		return d.client, d.err
	}
	s.mu.Unlock()
	select {
	case <-d.done:
		return d.client, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial connects to host hi, through its ProxyJump hosts when it has some.
func (s *SSHSpawner) dial(ctx context.Context, hi int) (*ssh.Client, error) {
	t := s.targets[hi]
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	var via *ssh.Client
	var jumps []*ssh.Client
	fail := func(err error) (*ssh.Client, error) {
		for i := len(jumps) - 1; i >= 0; i-- {
			jumps[i].Close()
		}
		return nil, err
	}
	for _, hop := range append(append([]*sshTarget(nil), t.jumps...), t) {
		c, err := s.handshake(ctx, hop, via)
		if err != nil {
			if hop != t {
				err = fmt.Errorf("jump host of %s: %w", t.alias, err)
			}
			return fail(err)
		}
		if hop != t {
			jumps = append(jumps, c)
		}
		via = c
	}
	if len(jumps) > 0 {
		s.mu.Lock()
		s.jumps = append(s.jumps, jumps...)
		s.mu.Unlock()
	}
	return via, nil
}

// handshake connects to hop, directly or through the client via, and logs in.
func (s *SSHSpawner) handshake(ctx context.Context, hop *sshTarget, via *ssh.Client) (*ssh.Client, error) {
	addr, who := hop.addr(), hop.who()
	var conn net.Conn
	var err error
	if via == nil {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = via.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &HostError{who, fmt.Errorf("unreachable: no connection within %v (--ssh-timeout): %v", s.cfg.ConnectTimeout, err)}
		}
		return nil, &HostError{who, fmt.Errorf("unreachable: %v", err)}
	}
	// The handshake honours the same deadline and the context.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stopWatch := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: hop.user, Auth: hop.auth, HostKeyCallback: hop.hostKey, Timeout: s.cfg.ConnectTimeout,
	})
	stopWatch()
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return nil, &HostError{who, hk}
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, &HostError{who, fmt.Errorf("the host refused the login of user %s with every key offered (%s): %v", hop.user, hop.keysDesc, err)}
		case ctx.Err() != nil:
			return nil, &HostError{who, fmt.Errorf("no SSH handshake within %v (--ssh-timeout): %v", s.cfg.ConnectTimeout, err)}
		}
		return nil, &HostError{who, err}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// keepAlive probes c; a host that stops answering gets its connection closed, which fails
// its ranks' sessions (and so the job) instead of leaving the launcher waiting forever.
func (s *SSHSpawner) keepAlive(c *ssh.Client) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		res := make(chan error, 1)
		go func() {
			_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
			res <- err
		}()
		select {
		case <-s.stop:
			return
		case err := <-res:
			if err != nil {
				return // the connection is gone; its sessions have failed already
			}
		case <-time.After(3 * s.cfg.KeepAlive):
			fmt.Fprintf(s.log, "hetsync launch: host %s stopped answering SSH keep-alives for %v; closing the connection\n",
				c.RemoteAddr(), 3*s.cfg.KeepAlive)
			c.Close()
			return
		}
	}
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

// Rendezvous picks host:port for rank 0's rendezvous listener, on rank 0's host: the address
// of iface there when iface is set, else the address the launcher reached that host at (for
// "localhost": 127.0.0.1 when every rank is local, else the local address that routes to the
// first remote host), and a port that is free there a moment ago (asked of sshd with a
// port-0 remote forward; a random port in [20000, 32768) when sshd refuses forwarding).
func (s *SSHSpawner) Rendezvous(ctx context.Context, iface string) (string, error) {
	if len(s.placement) == 0 {
		return "", errors.New("no ranks placed")
	}
	hi := s.placement[0].Host
	h := s.hosts[hi]
	if h.Local() {
		ip := "127.0.0.1"
		if iface != "" {
			var err error
			if ip, err = InterfaceIP(iface); err != nil {
				return "", fmt.Errorf("--iface on rank 0's host (this machine): %w", err)
			}
		} else if remote := s.firstRemote(); remote >= 0 {
			conn, err := (&net.Dialer{}).DialContext(ctx, "udp", s.targets[remote].addr())
			if err != nil {
				return "", fmt.Errorf("finding the address of this machine that reaches host %s: %w", s.hosts[remote].Name, err)
			}
			ip = conn.LocalAddr().(*net.UDPAddr).IP.String()
			conn.Close()
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return "", fmt.Errorf("finding a free port on %s for the rendezvous: %w", ip, err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr, nil
	}
	c, err := s.client(ctx, hi)
	if err != nil {
		return "", err
	}
	var ip string
	if iface != "" {
		if ip, err = remoteInterfaceIP(c, iface); err != nil {
			return "", fmt.Errorf("--iface %s on host %s (rank 0's): %w", iface, h.Name, err)
		}
	} else if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		ip = ta.IP.String()
	} else {
		// Reached through a jump host: the ranks resolve the host's name themselves.
		ip = s.targets[hi].hostName
	}
	port := 0
	if l, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	if port == 0 {
		port = 20000 + rand.IntN(12768)
		fmt.Fprintf(s.log, "hetsync launch: host %s does not allow SSH port forwarding to find a free port; using rendezvous port %d (set --rendezvous to choose)\n", h.Name, port)
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

func (s *SSHSpawner) firstRemote() int {
	for _, sl := range s.placement {
		if !s.hosts[sl.Host].Local() {
			return sl.Host
		}
	}
	return -1
}

var inetAddr = regexp.MustCompile(`\binet6? ([0-9a-fA-F.:]+)/`)

// remoteInterfaceIP runs `ip -o addr show dev IFACE` on the host and returns its first IPv4
// address (else its first global IPv6 one).
func remoteInterfaceIP(c *ssh.Client, iface string) (string, error) {
	if !regexp.MustCompile(`^[A-Za-z0-9_.:@-]+$`).MatchString(iface) {
		return "", fmt.Errorf("%q is not an interface name", iface)
	}
	sess, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	out, err := sess.CombinedOutput("ip -o addr show dev " + shellQuote(iface))
	if err != nil {
		return "", fmt.Errorf("ip addr show: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var v6 string
	for _, m := range inetAddr.FindAllStringSubmatch(string(out), -1) {
		ip := net.ParseIP(m[1])
		if ip == nil || ip.IsLinkLocalUnicast() {
			continue
		}
		if ip.To4() != nil {
			return ip.String(), nil
		}
		if v6 == "" {
			v6 = ip.String()
		}
	}
	if v6 == "" {
		return "", errors.New("no usable IP address on it")
	}
	return v6, nil
}
