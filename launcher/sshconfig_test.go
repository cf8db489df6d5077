package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testConfig exercises what the launcher reads of ssh_config: patterns with wildcards and
// negation, first value wins, IdentityFile adding up, Include inside a Host block, key=value
// and quoted values, comments, and a Match block that applies to no host.
const testConfig = `# a user's ssh config
User   default-before-any-host
Host gpu*  !gpu-bad
    HostName %h.cluster.example
    User alice
    IdentityFile ~/.ssh/id_gpu_%r
Host gpu-bad
    Port=2200
Host "quoted" q2
    HostName 10.0.0.9   # trailing comment
    Include inc.conf
    IdentitiesOnly yes
Match exec "true"
    User never-me
Host *
    User bob
    Port 2222
    IdentityFile /keys/all
    ProxyJump jumpuser@bastion:2022,bastion2
`

const testInclude = `Port 2022
UserKnownHostsFile /kh/one /kh/two
`

func writeTestConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "inc.conf"), []byte(testInclude), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(testConfig, "inc.conf", filepath.Join(dir, "inc.conf"))), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

var configCases = []struct {
	alias string
	want  sshHostOptions
}{
	{"gpu-7", sshHostOptions{HostName: "%h.cluster.example", User: "default-before-any-host", Port: 2222,
		IdentityFiles: []string{"~/.ssh/id_gpu_%r", "/keys/all"}, ProxyJump: "jumpuser@bastion:2022,bastion2"}},
	{"gpu-bad", sshHostOptions{User: "default-before-any-host", Port: 2200, IdentityFiles: []string{"/keys/all"},
		ProxyJump: "jumpuser@bastion:2022,bastion2"}},
	{"q2", sshHostOptions{HostName: "10.0.0.9", User: "default-before-any-host", Port: 2022, IdentityFiles: []string{"/keys/all"},
		IdentitiesOnly: true, KnownHostsFiles: []string{"/kh/one", "/kh/two"}, ProxyJump: "jumpuser@bastion:2022,bastion2"}},
	// Patterns match the alias as given, case and all, as OpenSSH's do.
	{"GPU-upper", sshHostOptions{User: "default-before-any-host", Port: 2222, IdentityFiles: []string{"/keys/all"},
		ProxyJump: "jumpuser@bastion:2022,bastion2"}},
}

func TestSSHConfigLookup(t *testing.T) {
	c, err := readSSHConfig([]string{writeTestConfig(t)}, false, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], `Match exec true: not evaluated`) || !strings.Contains(c.Notes[0], "config:13") {
		t.Errorf("notes %q, want one about the Match block at line 13", c.Notes)
	}
	for _, tc := range configCases {
		t.Run(tc.alias, func(t *testing.T) {
			got, err := c.lookup(tc.alias)
			if err != nil {
				t.Fatal(err)
			}
			got.At = nil
			if got.HostName != tc.want.HostName || got.User != tc.want.User || got.Port != tc.want.Port ||
				!slices.Equal(got.IdentityFiles, tc.want.IdentityFiles) || got.IdentitiesOnly != tc.want.IdentitiesOnly ||
				!slices.Equal(got.KnownHostsFiles, tc.want.KnownHostsFiles) || got.ProxyJump != tc.want.ProxyJump {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestSSHConfigAgreesWithOpenSSH reads the same file with `ssh -G`, OpenSSH's own resolution,
// and compares what the launcher uses.
func TestSSHConfigAgreesWithOpenSSH(t *testing.T) {
	sshBin := sshClientPath(t)
	file := writeTestConfig(t)
	c, err := readSSHConfig([]string{file}, false, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range configCases {
		t.Run(tc.alias, func(t *testing.T) {
			out, err := exec.Command(sshBin, "-G", "-F", file, tc.alias).Output()
			if err != nil {
				t.Fatalf("ssh -G: %v", err)
			}
			want := map[string][]string{}
			for _, line := range strings.Split(string(out), "\n") {
				k, v, _ := strings.Cut(line, " ")
				want[strings.ToLower(k)] = append(want[strings.ToLower(k)], v)
			}
			o, err := c.lookup(tc.alias)
			if err != nil {
				t.Fatal(err)
			}
			// OpenSSH lower-cases the host name it was given.
			host, err := expandTokens(o.HostName, map[byte]string{'h': strings.ToLower(tc.alias)})
			if err != nil || o.HostName == "" {
				host = strings.ToLower(tc.alias)
			}
			got := map[string][]string{"hostname": {host}, "user": {o.User}, "port": {strconv.Itoa(o.Port)},
				"proxyjump": {o.ProxyJump}, "identityfile": o.IdentityFiles}
			for k, v := range got {
				if !slices.Equal(v, want[k]) {
					t.Errorf("%s: hetsync %q, ssh -G %q", k, v, want[k])
				}
			}
		})
	}
}

// sshClientPath finds OpenSSH's ssh, installing Debian's openssh-client when it is missing.
func sshClientPath(t *testing.T) string {
	t.Helper()
	return debianTool(t, "ssh", "/usr/bin/ssh", "openssh-client")
}

func TestSSHConfigErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"host without pattern", "Host\n", "config:1: Host without a pattern"},
		{"keyword without value", "Host a\n  User\n", "config:2: user without a value"},
		{"unterminated quote", "Host a\n  HostName \"x\n", "config:2: hostname: unterminated quote"},
		{"bad port", "Host a\n  Port 70000\n", "config:2: Port \"70000\""},
		{"include loop", "Include config\n", "Include nested more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, "config")
			if err := os.WriteFile(f, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := readSSHConfig([]string{f}, false, dir)
			if err == nil {
				_, err = c.lookup("a")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := readSSHConfig([]string{"/nonexistent/ssh_config"}, false, "/"); err == nil || !strings.Contains(err.Error(), "/nonexistent/ssh_config") {
		t.Errorf("missing file: got %v, want an error naming it", err)
	}
	if c, err := readSSHConfig([]string{"/nonexistent/ssh_config"}, true, "/"); err != nil || len(c.blocks) != 0 {
		t.Errorf("missing optional file: %v, %d blocks", err, len(c.blocks))
	}
	for _, tc := range []struct{ in, want, err string }{
		{"%h.x", "node.x", ""}, {"100%%", "100%", ""}, {"%d/k_%r@%h:%p", "/home/u/k_bob@node:22", ""},
		{"%z", "", "%z is not supported"}, {"50%", "", "lone %"},
	} {
		got, err := expandTokens(tc.in, map[byte]string{'h': "node", 'r': "bob", 'p': "22", 'd': "/home/u"})
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("expandTokens(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
