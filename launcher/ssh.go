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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHConfig says how to reach the hosts of a multi-host job. The zero value of every field
// selects the documented default.
type SSHConfig struct {
	// User is the login user on every host without its own user@; default: the current user.
	User string
	// Port is the SSH port; default 22.
	Port int
	// IdentityFiles are private keys to offer. Default: whichever of ~/.ssh/id_ed25519,
	// id_ecdsa and id_rsa exist. Keys with a passphrase are skipped: load them into ssh-agent.
	IdentityFiles []string
	// NoAgent stops the keys of the agent at SSH_AUTH_SOCK from being offered.
	NoAgent bool
	// KnownHostsFiles are checked for every host key. Default: ~/.ssh/known_hosts and
	// /etc/ssh/ssh_known_hosts, those that exist. An unknown or changed host key is refused.
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
// (LocalSpawner) on the host named "localhost". It keeps one SSH connection per host, opens
// one session per rank, and runs each rank under a small POSIX sh supervisor on the remote
// side, which puts the rank in its own process group (setsid) and stops that group when the
// launcher asks, when the rank exits, and when the connection to the launcher is lost (the
// session's stdin reaches end of file), so a launcher that dies, even by SIGKILL, leaves no
// rank behind. The rank's environment travels over stdin, not the command line, so the job
// secret never shows in the remote host's process list.
type SSHSpawner struct {
	cfg       SSHConfig
	hosts     []Host
	placement []Slot
	local     LocalSpawner
	log       io.Writer

	mu      sync.Mutex
	clients map[int]*ssh.Client
	dialing map[int]*dialResult
	agentC  net.Conn
	auth    []ssh.AuthMethod
	hostKey ssh.HostKeyCallback
	// keysDesc and knownFiles describe the keys offered and the known_hosts files checked,
	// for error messages.
	keysDesc, knownFiles string
	closed               bool
	stop                 chan struct{}
	wg                   sync.WaitGroup
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
		clients: map[int]*ssh.Client{}, dialing: map[int]*dialResult{}, stop: make(chan struct{})}
	if s.log == nil {
		s.log = io.Discard
	}
	if s.cfg.Port == 0 {
		s.cfg.Port = 22
	}
	if s.cfg.ConnectTimeout == 0 {
		s.cfg.ConnectTimeout = 10 * time.Second
	}
	if s.cfg.KeepAlive == 0 {
		s.cfg.KeepAlive = 5 * time.Second
	}
	if s.cfg.User == "" {
		s.cfg.User = currentUser()
	}
	if !s.anyRemote() {
		return s, nil
	}
	if err := s.setupAuth(); err != nil {
		return nil, err
	}
	if err := s.setupHostKeys(); err != nil {
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

func (s *SSHSpawner) setupAuth() error {
	var signers []ssh.Signer
	var notes []string
	files := s.cfg.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		if home, err := os.UserHomeDir(); err == nil {
			for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				files = append(files, filepath.Join(home, ".ssh", n))
			}
		}
	}
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			if explicit || !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("identity file: %w", err)
			}
			continue
		}
		signer, err := ssh.ParsePrivateKey(pem)
		var pp *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pp):
			fmt.Fprintf(s.log, "hetsync launch: identity file %s has a passphrase; skipping it (load it into ssh-agent)\n", f)
			continue
		case err != nil:
			return fmt.Errorf("identity file %s: %w", f, err)
		}
		signers = append(signers, signer)
		notes = append(notes, f)
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && !s.cfg.NoAgent {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Fprintf(s.log, "hetsync launch: ssh-agent at SSH_AUTH_SOCK=%s: %v; not using it\n", sock, err)
		} else {
			s.agentC = conn
			as, err := agent.NewClient(conn).Signers()
			if err != nil {
				return fmt.Errorf("ssh-agent at SSH_AUTH_SOCK=%s: %w", sock, err)
			}
			signers = append(signers, as...)
			notes = append(notes, fmt.Sprintf("%d key(s) of ssh-agent", len(as)))
		}
	}
	if len(signers) == 0 {
		return errors.New("no SSH key to log in with: give one with -i FILE, create ~/.ssh/id_ed25519, or start ssh-agent")
	}
	s.auth = []ssh.AuthMethod{ssh.PublicKeys(signers...)}
	s.keysDesc = strings.Join(notes, ", ")
	return nil
}

func (s *SSHSpawner) setupHostKeys() error {
	if s.cfg.InsecureSkipHostKey {
		fmt.Fprintf(s.log, "hetsync launch: WARNING: --ssh-insecure-skip-hostkey: host keys are NOT checked; "+
			"anyone on the network path can impersonate the hosts and receive the job secret\n")
		s.hostKey = ssh.InsecureIgnoreHostKey()
		return nil
	}
	files := s.cfg.KnownHostsFiles
	explicit := len(files) > 0
	if !explicit {
		if home, err := os.UserHomeDir(); err == nil {
			files = append(files, filepath.Join(home, ".ssh", "known_hosts"))
		}
		files = append(files, "/etc/ssh/ssh_known_hosts")
	}
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			if explicit {
				return fmt.Errorf("--ssh-known-hosts: %w", err)
			}
			continue
		}
		existing = append(existing, f)
	}
	if len(existing) == 0 {
		return fmt.Errorf("no known_hosts file (%s) to check the hosts' keys against: add them with ssh-keyscan, "+
			"or pass --ssh-insecure-skip-hostkey on a trusted test network", strings.Join(files, ", "))
	}
	cb, err := knownhosts.New(existing...)
	if err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	s.knownFiles = strings.Join(existing, ", ")
	s.hostKey = func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			if len(ke.Want) == 0 {
				return &HostKeyError{Addr: hostname, Files: s.knownFiles, Key: key}
			}
			return &HostKeyError{Addr: hostname, Files: s.knownFiles, Key: key, Mismatch: ke.Want[0].String()}
		}
		return err
	}
	return nil
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

func (s *SSHSpawner) target(hi int) (user, addr string) {
	h := s.hosts[hi]
	user = h.User
	if user == "" {
		user = s.cfg.User
	}
	return user, net.JoinHostPort(h.Name, strconv.Itoa(s.cfg.Port))
}

// Connect opens the SSH connection to every remote host of the placement, in parallel. The
// error names every host that could not be reached or refused the login.
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
			_, errs[i] = s.client(ctx, hi)
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

func (s *SSHSpawner) dial(ctx context.Context, hi int) (*ssh.Client, error) {
	user, addr := s.target(hi)
	who := user + "@" + addr
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
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
		User: user, Auth: s.auth, HostKeyCallback: s.hostKey, Timeout: s.cfg.ConnectTimeout,
	})
	stopWatch()
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		switch {
		case errors.As(err, &hk):
			return nil, &HostError{who, hk}
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, &HostError{who, fmt.Errorf("the host refused the login of user %s with every key offered (%s): %v", user, s.keysDesc, err)}
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
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	clients := s.clients
	s.clients = map[int]*ssh.Client{}
	s.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	if s.agentC != nil {
		s.agentC.Close()
	}
	s.wg.Wait()
	return nil
}

// Spawn starts rank spec.Rank on its host.
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
	c, err := s.client(ctx, hi)
	if err != nil {
		return nil, err
	}
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("rank %d on host %s: opening an SSH session: %w", spec.Rank, hostName, err)
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("rank %d on host %s: %w", spec.Rank, hostName, err)
	}
	sess.Stdout, sess.Stderr = spec.Stdout, spec.Stderr
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
	if err := sess.Start(remoteCommand(spec.Rank, hostName, dir, must, argv)); err != nil {
		sess.Close()
		return nil, fmt.Errorf("rank %d on host %s: starting %s: %w", spec.Rank, hostName, argv[0], err)
	}
	// The environment block: one KEY=value per line, then an empty line.
	var b strings.Builder
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	if _, err := io.WriteString(stdin, b.String()); err != nil {
		sess.Close()
		return nil, fmt.Errorf("rank %d on host %s: sending the environment: %w", spec.Rank, hostName, err)
	}
	return &sshProc{rank: spec.Rank, host: hostName, sess: sess, stdin: stdin}, nil
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

// remoteCommand is the command line of a rank's SSH session: a one-line POSIX sh supervisor
// (one line, so that any login shell passes it on), run with exec so that its own death by a
// signal reaches the launcher as that signal. It reads the environment block from stdin
// (fd 3), starts the rank in its own session and process group, and keeps reading stdin for
// "term" and "kill", which signal the rank's group; end of file (the launcher or its
// connection died) kills the group. When the rank exits, whatever it left in its group is
// killed, and the supervisor exits the same way: with the rank's status, or by the signal that
// killed the rank (a status above 128 is taken for one, as shells do).
func remoteCommand(rank int, host, dir string, mustCd bool, argv []string) string {
	var b strings.Builder
	b.WriteString(`exec 3<&0 </dev/null; `)
	b.WriteString(`while IFS= read -r v <&3 && [ -n "$v" ]; do export "$v"; done; `)
	if dir != "" {
		if mustCd {
			msg := fmt.Sprintf("hetsync: rank %d: cannot change to the directory %s on host %s (--remote-dir)", rank, dir, host)
			fmt.Fprintf(&b, `cd %s || { echo %s >&2; exit 127; }; `, shellQuote(dir), shellQuote(msg))
		} else {
			fmt.Fprintf(&b, `cd %s 2>/dev/null; `, shellQuote(dir))
		}
	}
	b.WriteString(`if command -v setsid >/dev/null 2>&1; then s=setsid; else s=; fi; `)
	b.WriteString(`$s`)
	for _, a := range argv {
		b.WriteByte(' ')
		b.WriteString(shellQuote(a))
	}
	b.WriteString(` 3<&- & p=$!; `)
	b.WriteString(`(while read -r c; do case $c in term) kill -TERM -$p 2>/dev/null || kill -TERM $p;; ` +
		`kill) kill -KILL -$p 2>/dev/null || kill -KILL $p;; esac; done; kill -KILL -$p 2>/dev/null || kill -KILL $p) ` +
		`<&3 >/dev/null 2>&1 & w=$!; `)
	b.WriteString(`wait $p; x=$?; kill -KILL -$p 2>/dev/null; kill $w 2>/dev/null; exec 3<&-; `)
	b.WriteString(`if [ $x -gt 128 ] && [ $x -lt 160 ]; then kill -$((x-128)) $$; fi; exit $x`)
	return "exec /bin/sh -c " + shellQuote(b.String())
}

// sshProc is a rank started over SSH.
type sshProc struct {
	rank  int
	host  string
	sess  *ssh.Session
	mu    sync.Mutex // orders the control messages
	stdin io.WriteCloser
}

func (p *sshProc) Wait() Exit {
	err := p.sess.Wait()
	p.mu.Lock()
	_ = p.stdin.Close()
	p.mu.Unlock()
	_ = p.sess.Close()
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return Exit{}
	case errors.As(err, &ee):
		if sig := ee.Signal(); sig != "" {
			if n, ok := sshSignals[sig]; ok {
				return Exit{Code: -1, Signal: n}
			}
			return Exit{Code: -1, Err: fmt.Errorf("host %s: killed by signal SIG%s", p.host, sig)}
		}
		return Exit{Code: ee.ExitStatus()}
	case errors.As(err, &missing):
		return Exit{Code: -1, Err: fmt.Errorf("host %s: the SSH connection ended without the rank's exit status (host down or connection lost)", p.host)}
	}
	return Exit{Code: -1, Err: fmt.Errorf("host %s: %w", p.host, err)}
}

// send writes a control line without blocking the supervisor loop of Job.Run on a slow or
// dead connection.
func (p *sshProc) send(msg string, closeAfter bool) {
	go func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, _ = io.WriteString(p.stdin, msg)
		if closeAfter {
			_ = p.stdin.Close()
		}
	}()
}

func (p *sshProc) Terminate() error { p.send("term\n", false); return nil }
func (p *sshProc) Kill() error      { p.send("kill\n", true); return nil }

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
			_, addr := s.target(remote)
			conn, err := (&net.Dialer{}).DialContext(ctx, "udp", addr)
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
	} else {
		ip = c.RemoteAddr().(*net.TCPAddr).IP.String()
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
