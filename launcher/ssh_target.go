package launcher

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshTarget is one host as the launcher reaches it: its name in the host list resolved
// through the ssh config and the flags, with the keys to offer and the host-key check.
type sshTarget struct {
	alias, user, hostName string
	port                  int
	auth                  []ssh.AuthMethod
	keysDesc              string // the keys offered, for errors
	hostKey               ssh.HostKeyCallback
	jumps                 []*sshTarget // ProxyJump hosts, first hop first
}

func (t *sshTarget) addr() string { return net.JoinHostPort(t.hostName, strconv.Itoa(t.port)) }

// who names the target in errors: user@host:port, after the alias when the config renamed it.
func (t *sshTarget) who() string {
	w := t.user + "@" + t.addr()
	if t.alias != t.hostName {
		w = t.alias + " (" + w + ")"
	}
	return w
}

// keyring loads each private key once, and the agent's keys once, for every target.
type keyring struct {
	signers map[string]ssh.Signer // nil: the file has a passphrase or is missing (noted)
	agent   []ssh.Signer
	hostKey map[string]ssh.HostKeyCallback // by the list of known_hosts files
}

// resolveTargets reads the ssh config and resolves every remote host of the placement.
func (s *SSHSpawner) resolveTargets() error {
	conf, err := s.readConfig()
	if err != nil {
		return err
	}
	for _, n := range conf.Notes {
		fmt.Fprintf(s.log, "hetsync launch: %s\n", n)
	}
	s.keys = &keyring{signers: map[string]ssh.Signer{}, hostKey: map[string]ssh.HostKeyCallback{}}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && !s.cfg.NoAgent {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Fprintf(s.log, "hetsync launch: ssh-agent at SSH_AUTH_SOCK=%s: %v; not using it\n", sock, err)
		} else {
			s.agentC = conn
			if s.keys.agent, err = agent.NewClient(conn).Signers(); err != nil {
				return fmt.Errorf("ssh-agent at SSH_AUTH_SOCK=%s: %w", sock, err)
			}
		}
	}
	if s.cfg.InsecureSkipHostKey {
		fmt.Fprintf(s.log, "hetsync launch: WARNING: --ssh-insecure-skip-hostkey: host keys are NOT checked; "+
			"anyone on the network path can impersonate the hosts and receive the job secret\n")
	}
	for _, sl := range s.placement {
		h := s.hosts[sl.Host]
		if h.Local() || s.targets[sl.Host] != nil {
			continue
		}
		user := h.User
		if user == "" {
			user = s.cfg.User
		}
		t, err := s.resolve(conf, h.Name, user, s.cfg.Port, true)
		if err != nil {
			return err
		}
		s.targets[sl.Host] = t
	}
	return nil
}

// readConfig reads SSHConfig.ConfigFile, or the user's and the system's files.
func (s *SSHSpawner) readConfig() (*sshConfigFile, error) {
	home, _ := os.UserHomeDir()
	switch s.cfg.ConfigFile {
	case "none":
		return &sshConfigFile{}, nil
	case "":
		user := []string{}
		if home != "" {
			user = append(user, filepath.Join(home, ".ssh", "config"))
		}
		c, err := readSSHConfig(user, true, filepath.Join(home, ".ssh"))
		if err != nil {
			return nil, err
		}
		sys, err := readSSHConfig([]string{"/etc/ssh/ssh_config"}, true, "/etc/ssh")
		if err != nil {
			return nil, err
		}
		c.blocks, c.Notes = append(c.blocks, sys.blocks...), append(c.Notes, sys.Notes...)
		return c, nil
	}
	// ssh resolves an explicit file's relative Includes against ~/.ssh as well.
	return readSSHConfig([]string{expandHome(s.cfg.ConfigFile)}, false, filepath.Join(home, ".ssh"))
}

// resolve builds the target for alias. user and port, when set, override the config (the
// command line wins in ssh too); jumps says whether a ProxyJump is followed (not for the jump
// hosts themselves).
func (s *SSHSpawner) resolve(conf *sshConfigFile, alias, user string, port int, jumps bool) (*sshTarget, error) {
	o, err := conf.lookup(alias)
	if err != nil {
		return nil, err
	}
	if o.ProxyCommand != "" {
		return nil, fmt.Errorf("host %s: ProxyCommand (%s, %s) is not supported by hetsync's launcher: reach the host with ProxyJump instead",
			alias, o.ProxyCommand, o.At["proxycommand"])
	}
	// Host names are case-insensitive; OpenSSH lower-cases the one it was given too.
	t := &sshTarget{alias: alias, user: user, port: port, hostName: strings.ToLower(alias)}
	if t.user == "" {
		t.user = o.User
	}
	if t.user == "" {
		t.user = currentUser()
	}
	if t.port == 0 {
		t.port = o.Port
	}
	if t.port == 0 {
		t.port = 22
	}
	home, _ := os.UserHomeDir()
	tokens := map[byte]string{'h': t.hostName, 'n': alias, 'p': strconv.Itoa(t.port), 'r': t.user, 'u': currentUser(), 'd': home}
	if o.HostName != "" {
		if t.hostName, err = expandTokens(o.HostName, tokens); err != nil {
			return nil, fmt.Errorf("ssh config %s: HostName %w", o.At["hostname"], err)
		}
		tokens['h'] = t.hostName
	}
	expandAll := func(key string, files []string) ([]string, error) {
		var out []string
		for _, f := range files {
			x, err := expandTokens(f, tokens)
			if err != nil {
				return nil, fmt.Errorf("ssh config %s: %w", o.At[key], err)
			}
			out = append(out, expandHome(x))
		}
		return out, nil
	}
	idFiles, err := expandAll("identityfile", o.IdentityFiles)
	if err != nil {
		return nil, err
	}
	if err := s.setAuth(t, idFiles, !o.IdentitiesOnly); err != nil {
		return nil, err
	}
	known, err := expandAll("userknownhostsfile", o.KnownHostsFiles)
	if err != nil {
		return nil, err
	}
	if t.hostKey, err = s.hostKeyCheck(known); err != nil {
		return nil, err
	}
	if !jumps || o.ProxyJump == "" || strings.EqualFold(o.ProxyJump, "none") {
		return t, nil
	}
	for _, hop := range strings.Split(o.ProxyJump, ",") {
		u, hp, ok := strings.Cut(hop, "@")
		if !ok {
			u, hp = "", hop
		}
		host, p := hp, 0
		if h, ps, err := net.SplitHostPort(hp); err == nil {
			if p, err = strconv.Atoi(ps); err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("ssh config %s: ProxyJump %q: bad port %q", o.At["proxyjump"], hop, ps)
			}
			host = h
		}
		if host == "" || strings.Contains(hp, "://") {
			return nil, fmt.Errorf("ssh config %s: ProxyJump %q: want [user@]host[:port]", o.At["proxyjump"], hop)
		}
		j, err := s.resolve(conf, host, u, p, false)
		if err != nil {
			return nil, fmt.Errorf("jump host %s of %s: %w", host, alias, err)
		}
		t.jumps = append(t.jumps, j)
	}
	return t, nil
}

// setAuth gives t the keys of the -i files and the config's IdentityFile lines (or the
// default files when neither names one), then the agent's unless IdentitiesOnly.
func (s *SSHSpawner) setAuth(t *sshTarget, fromConfig []string, useAgent bool) error {
	var signers []ssh.Signer
	var notes []string
	add := func(f string, must bool) error {
		signer, seen := s.keys.signers[f]
		if !seen {
			var err error
			if signer, err = s.loadKey(f, must); err != nil {
				return err
			}
			s.keys.signers[f] = signer
		}
		if signer != nil {
			signers = append(signers, signer)
			notes = append(notes, f)
		}
		return nil
	}
	for _, f := range s.cfg.IdentityFiles {
		if err := add(f, true); err != nil {
			return err
		}
	}
	for _, f := range fromConfig {
		if err := add(f, false); err != nil {
			return err
		}
	}
	if len(s.cfg.IdentityFiles) == 0 && len(fromConfig) == 0 {
		if home, err := os.UserHomeDir(); err == nil {
			for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				if err := add(filepath.Join(home, ".ssh", n), false); err != nil {
					return err
				}
			}
		}
	}
	if useAgent && len(s.keys.agent) > 0 {
		signers = append(signers, s.keys.agent...)
		notes = append(notes, fmt.Sprintf("%d key(s) of ssh-agent", len(s.keys.agent)))
	}
	if len(signers) == 0 {
		return fmt.Errorf("host %s: no SSH key to log in with: give one with -i FILE or IdentityFile in the ssh config, create ~/.ssh/id_ed25519, or start ssh-agent", t.alias)
	}
	t.auth = []ssh.AuthMethod{ssh.PublicKeys(signers...)}
	t.keysDesc = strings.Join(notes, ", ")
	return nil
}

// loadKey reads a private key. A file that is missing (unless must) or has a passphrase is
// noted in the log and gives nil.
func (s *SSHSpawner) loadKey(f string, must bool) (ssh.Signer, error) {
	pem, err := os.ReadFile(f)
	if err != nil {
		if must {
			return nil, fmt.Errorf("identity file: %w", err)
		}
		if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(s.log, "hetsync launch: identity file %s: %v; skipping it\n", f, err)
		}
		return nil, nil
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var pp *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &pp):
		fmt.Fprintf(s.log, "hetsync launch: identity file %s has a passphrase; skipping it (load it into ssh-agent)\n", f)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("identity file %s: %w", f, err)
	}
	return signer, nil
}

// hostKeyCheck is the known_hosts check of a target whose config names fromConfig
// (UserKnownHostsFile); --ssh-known-hosts replaces both it and the default user file.
func (s *SSHSpawner) hostKeyCheck(fromConfig []string) (ssh.HostKeyCallback, error) {
	if s.cfg.InsecureSkipHostKey {
		return ssh.InsecureIgnoreHostKey(), nil
	}
	files := s.cfg.KnownHostsFiles
	explicit := len(files) > 0
	if !explicit {
		files = fromConfig
		if len(files) == 0 {
			if home, err := os.UserHomeDir(); err == nil {
				files = append(files, filepath.Join(home, ".ssh", "known_hosts"))
			}
		}
		files = append(files, "/etc/ssh/ssh_known_hosts")
	}
	key := strings.Join(files, "\x00")
	if cb := s.keys.hostKey[key]; cb != nil {
		return cb, nil
	}
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			if explicit {
				return nil, fmt.Errorf("--ssh-known-hosts: %w", err)
			}
			continue
		}
		existing = append(existing, f)
	}
	if len(existing) == 0 {
		return nil, fmt.Errorf("no known_hosts file (%s) to check the hosts' keys against: add them with ssh-keyscan, "+
			"or pass --ssh-insecure-skip-hostkey on a trusted test network", strings.Join(files, ", "))
	}
	check, err := knownhosts.New(existing...)
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	desc := strings.Join(existing, ", ")
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := check(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			if len(ke.Want) == 0 {
				return &HostKeyError{Addr: hostname, Files: desc, Key: key}
			}
			return &HostKeyError{Addr: hostname, Files: desc, Key: key, Mismatch: ke.Want[0].String()}
		}
		return err
	}
	s.keys.hostKey[key] = cb
	return cb, nil
}
