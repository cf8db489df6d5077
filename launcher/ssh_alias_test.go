package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// aliasConfig is an ssh config that reaches s only through Host aliases: HostName, a
// non-default Port, User, IdentityFile and UserKnownHostsFile come from it alone ("Host *"
// comes last and would send the launcher to a wrong port and user if it overrode them).
func aliasConfig(s *testSSHD) string {
	return fmt.Sprintf(`Host gpu-node
    HostName 127.0.0.2
Host jump
    HostName 127.0.0.1
Host inner
    HostName 127.0.0.2
    ProxyJump jump
Host gpu-node jump inner
    Port %d
    User %s
    IdentityFile %s
    IdentitiesOnly yes
    UserKnownHostsFile %s
Host *
    Port 1
    User nobody-hetsync
`, s.Port, currentUser(), s.UserKey, s.KnownHosts)
}

// aliasJob runs two ranks on host alias with only the ssh config saying how to reach it, and
// returns their output: each rank prints its host name and the SSH connection it runs under.
func aliasJob(t *testing.T, s *testSSHD, cfg SSHConfig, alias string) string {
	t.Helper()
	hosts, err := ParseHostList(alias + ":2")
	if err != nil {
		t.Fatal(err)
	}
	place, err := Place(hosts, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoAgent, cfg.SupervisorCommand = true, s.config().SupervisorCommand
	var log syncBuffer
	cfg.Log = &log
	sp, err := NewSSHSpawner(cfg, hosts, place)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var stdout, stderr syncBuffer
	job := &Job{
		NP: 2, Command: []string{"sh", "-c", `echo "on $HETSYNC_HOSTNAME via $SSH_CONNECTION as $(id -un)"`}, Env: os.Environ(),
		Stdout: &stdout, Stderr: &stderr, Log: &stderr, Spawner: sp, Hosts: hosts, Placement: place, Rendezvous: "127.0.0.1:1",
	}
	if err := job.Run(testContext(t)); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s\nlauncher log:\n%s", err, stderr.String(), log.String())
	}
	want := fmt.Sprintf(" 127.0.0.2 %d as %s", s.Port, currentUser())
	for r := 0; r < 2; r++ {
		prefix := fmt.Sprintf("[%d] on %s via ", r, alias)
		if !strings.Contains(stdout.String(), prefix) || strings.Count(stdout.String(), want) != 2 {
			t.Errorf("rank %d: want a line %q...%q in\n%s", r, prefix, want, stdout.String())
		}
	}
	return stdout.String()
}

func TestSSHHostAliasFromConfig(t *testing.T) {
	s := startSSHDWith(t, sshdOptions{Addrs: []string{"127.0.0.1", "127.0.0.2"}, LogLevel: "DEBUG1"})
	dir := t.TempDir()
	file := filepath.Join(dir, "config")
	if err := os.WriteFile(file, []byte(aliasConfig(s)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("config file", func(t *testing.T) {
		aliasJob(t, s, SSHConfig{ConfigFile: file}, "gpu-node")
	})
	t.Run("user's config", func(t *testing.T) {
		home := t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(aliasConfig(s)), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("HOME", home)
		aliasJob(t, s, SSHConfig{}, "gpu-node")
	})
	t.Run("flags override the config", func(t *testing.T) {
		hosts := []Host{{Name: "gpu-node", Slots: 1}}
		sp, err := NewSSHSpawner(SSHConfig{ConfigFile: file, NoAgent: true, User: "flag-user", SupervisorCommand: s.config().SupervisorCommand},
			hosts, []Slot{{Host: 0, LocalSize: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		err = sp.Connect(testContext(t))
		want := fmt.Sprintf("ssh to host gpu-node (flag-user@127.0.0.2:%d)", s.Port)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %q", err, want)
		}
	})
	t.Run("ProxyJump", func(t *testing.T) {
		aliasJob(t, s, SSHConfig{ConfigFile: file}, "inner")
		// The connection to 127.0.0.2 went through the jump host's sshd, as a forwarded channel.
		if want := fmt.Sprintf("target 127.0.0.2 port %d", s.Port); !strings.Contains(s.log.String(), want) {
			t.Errorf("no %q in the sshd's log: the launcher did not go through the jump host\n%s", want, s.log.String())
		}
	})
	t.Run("ProxyCommand", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(f, []byte("Host pc\n  ProxyCommand nc %h %p\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := NewSSHSpawner(SSHConfig{ConfigFile: f, NoAgent: true}, []Host{{Name: "pc", Slots: 1}}, []Slot{{Host: 0, LocalSize: 1}})
		if err == nil || !strings.Contains(err.Error(), "host pc: ProxyCommand") || !strings.Contains(err.Error(), "ProxyJump") {
			t.Errorf("got %v, want a refusal of ProxyCommand naming the host", err)
		}
	})
}

// TestSSHHostAliasCommandLine launches through a Host alias with hetsync itself: -F FILE, and
// HETSYNC_SSH_CONFIG for tools that cannot add a flag.
func TestSSHHostAliasCommandLine(t *testing.T) {
	s := startSSHD(t, "", "127.0.0.1", "127.0.0.2")
	file := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(file, []byte(aliasConfig(s)), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := hetsyncBinary(t)
	rank := []string{"--", "sh", "-c", `echo "on $HETSYNC_HOSTNAME via $SSH_CONNECTION"`}
	tests := []struct {
		name string
		args []string
		env  string
	}{
		{"-F", append([]string{"launch", "-H", "gpu-node:2", "--ssh-no-agent", "-F", file}, rank...), ""},
		{"HETSYNC_SSH_CONFIG", append([]string{"launch", "-H", "gpu-node:2", "--ssh-no-agent"}, rank...), file},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HETSYNC_SSH_CONFIG", tc.env)
			code, out, stderr := runHetsync(t, bin, t.TempDir(), tc.args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			for r := 0; r < 2; r++ {
				if want := fmt.Sprintf("[%d] on gpu-node via 127.0.0.1 ", r); !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
			if strings.Count(out, fmt.Sprintf(" 127.0.0.2 %d\n", s.Port)) != 2 {
				t.Errorf("the ranks did not run under an SSH connection to 127.0.0.2:%d:\n%s", s.Port, out)
			}
		})
	}
}
