package launcher

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// netnsHosts makes n "hosts": network namespaces joined by a bridge in this namespace, host i
// at 10.77.X.(i+2) on its interface "hs0", this namespace at 10.77.X.1 on the bridge. X is
// random so that concurrent test runs do not meet. Everything is removed when the test ends.
// It skips the test when not root.
func netnsHosts(t *testing.T, n int) (names, addrs []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: run as root (CI does) for the multi-host test across namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) is missing")
	}
	id := rand.IntN(200) + 20
	tag := fmt.Sprintf("hs%d%03d", os.Getpid()%1000, id)
	bridge := tag + "b"
	subnet := fmt.Sprintf("10.77.%d.", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for _, ns := range names {
			_ = exec.Command("ip", "netns", "del", ns).Run() // takes its veth pair along
		}
		_ = exec.Command("ip", "link", "del", bridge).Run()
	})
	run("link", "add", bridge, "type", "bridge")
	run("addr", "add", subnet+"1/24", "dev", bridge)
	run("link", "set", bridge, "up")
	for i := 0; i < n; i++ {
		ns, veth := fmt.Sprintf("%s-%d", tag, i), fmt.Sprintf("%sv%d", tag, i)
		run("netns", "add", ns)
		names = append(names, ns)
		run("-n", ns, "link", "set", "lo", "up")
		run("link", "add", veth, "type", "veth", "peer", "name", "hs0", "netns", ns)
		run("link", "set", veth, "master", bridge)
		run("link", "set", veth, "up")
		addr := subnet + strconv.Itoa(i+2)
		run("-n", ns, "addr", "add", addr+"/24", "dev", "hs0")
		run("-n", ns, "link", "set", "hs0", "up")
		addrs = append(addrs, addr)
	}
	return names, addrs
}

// TestSSHAcrossNetworkNamespaces runs a job on three "hosts" with their own addresses, each
// with its own sshd; the launcher runs in this namespace and reaches them over the bridge.
func TestSSHAcrossNetworkNamespaces(t *testing.T) {
	names, addrs := netnsHosts(t, 3)
	bin := hetsyncBinary(t)
	userKey := filepath.Join(t.TempDir(), "user_key")
	writeKey(t, userKey)
	port := freePort(t)
	var known []string
	for i, ns := range names {
		s := startSSHDWith(t, sshdOptions{Netns: ns, Addrs: []string{addrs[i]}, Port: port, UserKey: userKey})
		known = append(known, s.KnownHosts)
	}
	ssh := []string{"--ssh-port", strconv.Itoa(port), "-i", userKey, "--ssh-no-agent"}
	for _, k := range known {
		ssh = append(ssh, "--ssh-known-hosts", k)
	}
	hosts := fmt.Sprintf("%s:2,%s:1,%s:2", addrs[0], addrs[1], addrs[2])
	tests := []struct {
		name  string
		extra []string
	}{
		{"default addresses", nil},
		{"iface", []string{"--iface", "hs0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, benchArgs...), "-np", "5", "-H", hosts), ssh...)
			code, out, stderr := runHetsync(t, bin, t.TempDir(), append(args, tc.extra...)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			checkBenchTSV(t, out, 5, 3)
		})
	}
	t.Run("ranks see their host", func(t *testing.T) {
		// Each rank runs inside its host's namespace: it has that host's address.
		args := append([]string{"launch", "-H", hosts}, ssh...)
		args = append(args, "--", "sh", "-c", `echo "$HETSYNC_HOSTNAME $(ip -o -4 addr show dev hs0 | awk '{print $4}')"`)
		code, out, stderr := runHetsync(t, bin, t.TempDir(), args...)
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
