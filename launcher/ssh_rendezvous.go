package launcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

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
