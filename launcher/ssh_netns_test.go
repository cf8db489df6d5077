package launcher

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/internal/netns"
)

// TestSSHAcrossNetworkNamespaces runs a job on three "hosts" with their own addresses, each
// with its own sshd; the launcher runs on a fourth host and reaches them over the network.
func TestSSHAcrossNetworkNamespaces(t *testing.T) {
	n := netns.ForTest(t, netns.Spec{Topology: netns.Uniform, Hosts: 4, Unshaped: true})
	var names, addrs []string
	for _, h := range n.Hosts[:3] {
		names, addrs = append(names, h.Namespace), append(addrs, h.Addr)
	}
	login := n.Hosts[3].Namespace
	bin := hetsyncBinary(t)
	userKey := filepath.Join(t.TempDir(), "user_key")
	writeKey(t, userKey)
	port := freePort(t)
	var known []string
	for i, ns := range names {
		s := startSSHDWith(t, sshdOptions{Netns: ns, Addrs: []string{addrs[i]}, Port: port, UserKey: userKey})
		known = append(known, s.KnownHosts)
	}
	ssh := []string{"--ssh-port", strconv.Itoa(port), "-i", userKey, "--ssh-no-agent", "--ssh-config", "none"}
	for _, k := range known {
		ssh = append(ssh, "--ssh-known-hosts", k)
	}
	hosts := fmt.Sprintf("%s:2,%s:1,%s:2", addrs[0], addrs[1], addrs[2])
	tests := []struct {
		name  string
		extra []string
	}{
		{"default addresses", nil},
		{"iface", []string{"--iface", "eth0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, benchArgs...), "-np", "5", "-H", hosts), ssh...)
			code, out, stderr := runHetsyncIn(t, login, bin, t.TempDir(), append(args, tc.extra...)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			checkBenchTSV(t, out, 5, 3)
		})
	}
	t.Run("ranks see their host", func(t *testing.T) {
		// Each rank runs inside its host's namespace: it has that host's address.
		args := append([]string{"launch", "-H", hosts}, ssh...)
		args = append(args, "--", "sh", "-c", `echo "$HETSYNC_HOSTNAME $(ip -o -4 addr show dev eth0 | awk '{print $4}')"`)
		code, out, stderr := runHetsyncIn(t, login, bin, t.TempDir(), args...)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		for r, h := range []int{0, 0, 1, 2, 2} {
			want := fmt.Sprintf("[%d] %s %s/24\n", r, addrs[h], addrs[h])
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}
