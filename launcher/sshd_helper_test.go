package launcher

import (
	"cmp"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/freeport"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testSSHD is a real OpenSSH server started for one test: its own host key, one authorized
// user key, listening on the given addresses (all with one port), logging in as the current
// user. Its other settings are OpenSSH's defaults, MaxSessions (10 sessions per connection)
// and MaxStartups included: what a cluster's stock sshd allows is what the launcher gets.
type testSSHD struct {
	Port       int
	Addrs      []string
	UserKey    string // private key file the server accepts
	KnownHosts string // known_hosts file with the server's key for every address
	HostKey    ssh.PublicKey
	dir        string
	testBinary string // this test binary, which serves as the hosts' supervisor
	log        syncBuffer
}

// sshdPath finds sshd, installing Debian's openssh-server when it is missing and we are root
// (scripts/setup-system.sh). Without sshd and without root the test is skipped.
func sshdPath(t *testing.T) string {
	t.Helper()
	return debianTool(t, "sshd", "/usr/sbin/sshd", "openssh-server")
}

// debianTool finds program in PATH or at path, installing Debian's package pkg when it is
// missing and we are root; without it and without root the test is skipped.
func debianTool(t *testing.T, program, path, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(program); err == nil {
		return p
	}
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s not installed and not root: install %s (scripts/setup-system.sh %s) to run the SSH tests", program, pkg, pkg)
	}
	out, err := exec.Command("bash", "../scripts/setup-system.sh", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("installing %s: %v\n%s", pkg, err, out)
	}
	return path
}

// writeKey writes a new ed25519 private key (OpenSSH format) to path and returns its public key.
func writeKey(t *testing.T, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "hetsync test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// startSSHD starts sshd -D on addrs (default 127.0.0.1) in network namespace netns ("" for
// this one) and stops it when the test ends.
func startSSHD(t *testing.T, netns string, addrs ...string) *testSSHD {
	t.Helper()
	return startSSHDWith(t, sshdOptions{Netns: netns, Addrs: addrs})
}

type sshdOptions struct {
	Netns    string
	Addrs    []string
	Port     int    // 0: a free port
	UserKey  string // the user key to accept; "": a new one
	LogLevel string // sshd's LogLevel; "": ERROR
}

func startSSHDWith(t *testing.T, o sshdOptions) *testSSHD {
	t.Helper()
	bin := sshdPath(t)
	netns, addrs := o.Netns, o.Addrs
	if len(addrs) == 0 {
		addrs = []string{"127.0.0.1"}
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege-separation directory
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &testSSHD{Addrs: addrs, dir: dir, testBinary: exe, UserKey: filepath.Join(dir, "user_key"), KnownHosts: filepath.Join(dir, "known_hosts")}
	s.HostKey = writeKey(t, filepath.Join(dir, "host_key"))
	var userPub ssh.PublicKey
	if o.UserKey != "" {
		s.UserKey = o.UserKey
		pem, err := os.ReadFile(o.UserKey)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			t.Fatal(err)
		}
		userPub = signer.PublicKey()
	} else {
		userPub = writeKey(t, s.UserKey)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(userPub), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Port = o.Port
	if s.Port == 0 {
		s.Port = freePort(t)
	}
	var known []string
	for _, a := range addrs {
		known = append(known, knownhosts.Line([]string{net.JoinHostPort(a, strconv.Itoa(s.Port))}, s.HostKey))
	}
	if err := os.WriteFile(s.KnownHosts, []byte(strings.Join(known, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&cfg, "ListenAddress %s\n", a)
	}
	fmt.Fprintf(&cfg, "HostKey %s\nAuthorizedKeysFile %s\nPidFile none\nStrictModes no\nUsePAM no\n"+
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"+
		"AllowTcpForwarding yes\nLogLevel %s\n",
		filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"), cmp.Or(o.LogLevel, "ERROR"))
	cfgPath := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{bin, "-D", "-e", "-f", cfgPath, "-p", strconv.Itoa(s.Port)}
	if netns != "" {
		args = append([]string{"ip", "netns", "exec", netns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	logb := &s.log
	cmd.Stdout, cmd.Stderr = logb, logb
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sshd log:\n%s", logb.String())
		}
	})
	// Wait until it accepts connections on every address (or has died), connecting from its
	// own namespace: this one need not reach another's.
	dial := func(a string) error {
		if netns == "" {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(a, strconv.Itoa(s.Port)), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}
		out, err := exec.Command("ip", "netns", "exec", netns, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", a, s.Port)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	for _, a := range addrs {
		addr := net.JoinHostPort(a, strconv.Itoa(s.Port))
		for i := 0; ; i++ {
			err := dial(a)
			if err == nil {
				break
			}
			select {
			case <-exited:
				t.Fatalf("sshd exited: %s", logb.String())
			case <-time.After(50 * time.Millisecond):
			}
			if i > 200 {
				t.Fatalf("sshd does not accept connections on %s: %v\n%s", addr, err, logb.String())
			}
		}
	}
	return s
}

func freePort(t *testing.T) int {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return n
}

// closedPort is a loopback port that refuses connections for the rest of the test: a socket
// bound to it that never listens holds it, so no other process of a shared machine can take
// it between the choice and the dial, as it can a port found free and released.
func closedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// config is an SSHConfig that logs in to s, with this test binary as the hosts' supervisor
// (TestMain), and without the ssh config files of the machine the test runs on.
func (s *testSSHD) config() SSHConfig {
	return SSHConfig{Port: s.Port, IdentityFiles: []string{s.UserKey}, KnownHostsFiles: []string{s.KnownHosts}, NoAgent: true,
		ConfigFile: "none", SupervisorCommand: []string{"env", helperEnv + "=supervise", s.testBinary}}
}

// hetsyncBinary builds cmd/hetsync into the test's temporary directory (the build cache makes
// every build after the first one a link).
func hetsyncBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hetsync")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/hetsync/hetsync/cmd/hetsync").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/hetsync: %v\n%s", err, out)
	}
	return bin
}

// processesWith lists the pids of processes whose command line contains marker.
func processesWith(marker string) []int { return processesMatching(marker, false) }

// processesMatching lists the pids of processes whose command line contains marker, or with
// exact, is marker.
func processesMatching(marker string, exact bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if exact && args == marker || !exact && strings.Contains(args, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoProcesses waits (bounded) for every process with marker to be gone; processes that
// a remote supervisor is still reaping get a moment. It fails the test with the leftovers.
func waitNoProcesses(t *testing.T, marker string) {
	t.Helper()
	var left []int
	for i := 0; i < 100; i++ {
		if left = processesWith(marker); len(left) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("processes left behind with %q in their command line: %v", marker, left)
	for _, p := range left {
		_ = syscallKill(p)
	}
}
