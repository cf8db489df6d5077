package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRankEnvFromEnviron(t *testing.T) {
	good := map[string]string{
		EnvRank: "2", EnvWorldSize: "4", EnvLocalRank: "0", EnvLocalSize: "2",
		EnvRendezvous: "127.0.0.1:29400", EnvSecret: "00112233445566778899aabbccddeeff",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fileSecret := "ffeeddccbbaa99887766554433221100"
	secretFile, sameFile, badFile := file("secret", fileSecret+"\n"), file("same", good[EnvSecret]+"\n"), file("bad", "xyz")
	withFile := func(path string, secret string) map[string]string {
		m := with(EnvSecretFile, path)
		m[EnvSecret] = secret
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    RankEnv
		under   bool
		errWant string // substring of the error; "" = no error
	}{
		{"secret file", withFile(secretFile, ""), RankEnv{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Rendezvous: "127.0.0.1:29400", Secret: fileSecret}, true, ""},
		{"secret file and the same secret", withFile(sameFile, good[EnvSecret]),
			RankEnv{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Rendezvous: "127.0.0.1:29400", Secret: good[EnvSecret]}, true, ""},
		{"secret file and another secret", withFile(secretFile, good[EnvSecret]), RankEnv{}, true,
			"HETSYNC_JOB_SECRET and HETSYNC_JOB_SECRET_FILE " + secretFile + " are both set and hold different secrets"},
		{"secret file missing", withFile(filepath.Join(dir, "none"), ""), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE: open " + dir},
		{"secret file not hex", withFile(badFile, ""), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE " + badFile + ": not a hex string"},
		{"not under a launcher", map[string]string{}, RankEnv{}, false, ""},
		{"good", good, RankEnv{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Rendezvous: "127.0.0.1:29400", Secret: "00112233445566778899aabbccddeeff"}, true, ""},
		{"rank not a number", with(EnvRank, "two"), RankEnv{}, true, `HETSYNC_RANK="two": not an integer`},
		{"size missing", with(EnvWorldSize, ""), RankEnv{}, true, "HETSYNC_WORLD_SIZE is missing"},
		{"rank too big", with(EnvRank, "4"), RankEnv{}, true, "HETSYNC_RANK=4: rank must be in [0, 4)"},
		{"negative rank", with(EnvRank, "-1"), RankEnv{}, true, "HETSYNC_RANK=-1"},
		{"zero size", with(EnvWorldSize, "0"), RankEnv{}, true, "HETSYNC_WORLD_SIZE=0"},
		{"local rank too big", with(EnvLocalRank, "2"), RankEnv{}, true, "HETSYNC_LOCAL_RANK=2"},
		{"local size too big", with(EnvLocalSize, "5"), RankEnv{}, true, "HETSYNC_LOCAL_SIZE=5"},
		{"rendezvous missing", with(EnvRendezvous, ""), RankEnv{}, true, "HETSYNC_RENDEZVOUS is missing"},
		{"rendezvous without port", with(EnvRendezvous, "localhost"), RankEnv{}, true, "HETSYNC_RENDEZVOUS=\"localhost\": want host:port"},
		{"rendezvous bad port", with(EnvRendezvous, "h:99999"), RankEnv{}, true, "port \"99999\""},
		{"secret missing", with(EnvSecret, ""), RankEnv{}, true, "HETSYNC_JOB_SECRET is empty"},
		{"secret not hex", with(EnvSecret, "xyz"), RankEnv{}, true, "HETSYNC_JOB_SECRET: not a hex string"},
		{"secret of one byte", with(EnvSecret, "ab"), RankEnv{}, true, "HETSYNC_JOB_SECRET: too short (2 hex digits): a job secret authenticates every rank and needs at least 16 random bytes"},
		{"secret of 15 bytes", with(EnvSecret, "00112233445566778899aabbccddee"), RankEnv{}, true, "HETSYNC_JOB_SECRET: too short (30 hex digits)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, under, err := RankEnvFromEnviron(func(k string) string { return tc.env[k] })
			if under != tc.under {
				t.Errorf("under launcher = %v, want %v", under, tc.under)
			}
			if tc.errWant == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.errWant)
			}
		})
	}
}

func TestRankEnvRoundTrip(t *testing.T) {
	e := RankEnv{Rank: 3, Size: 7, LocalRank: 1, LocalSize: 3, Rendezvous: "[::1]:1234", Secret: "00112233445566778899aabbccddeeff",
		Settings: Settings{Collective: "butterfly", Security: "none", DataPath: "shm", JoinTimeout: 2 * time.Minute, Poll: time.Millisecond, Checksum: true, Links: "measure",
			Arena: "off"}}
	m := map[string]string{}
	for _, kv := range rankEnviron([]string{"HETSYNC_RANK=9", "PATH=/bin", "RANK=9", "HETSYNC_SECURITY=tls", "MASTER_PORT=1"}, e) {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := m[k]; dup {
			t.Errorf("variable %s set twice", k)
		}
		m[k] = v
	}
	got, under, err := RankEnvFromEnviron(func(k string) string { return m[k] })
	if err != nil || !under || got != e {
		t.Fatalf("round trip: got %+v, %v, %v; want %+v", got, under, err, e)
	}
	for k, want := range map[string]string{"RANK": "3", "WORLD_SIZE": "7", "LOCAL_RANK": "1", "PATH": "/bin",
		"MASTER_ADDR": "::1", "MASTER_PORT": "1234", "HETSYNC_SECURITY": "none", "HETSYNC_DATA_PATH": "shm", "HETSYNC_LINKS": "measure", "HETSYNC_ARENA": "off"} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
}
