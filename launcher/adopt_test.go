package launcher

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/ranktest"
)

func TestAdoptRankEnv(t *testing.T) {
	const secret = "00112233445566778899aabbccddeeff"
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("abcdabcdabcdabcdabcdabcdabcdabcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shortFile := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(shortFile, []byte("ab\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notHexFile := filepath.Join(t.TempDir(), "nothex")
	if err := os.WriteFile(notHexFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	slurm := map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
		"SLURM_STEP_TASKS_PER_NODE": "3,2", EnvSecret: secret, EnvRendezvous: "node0:29400"}
	ompi := map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "2", EnvSecretFile: secretFile, EnvRendezvous: "10.0.0.1:29400"}
	torch := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", EnvSecret: secret}
	k8s := map[string]string{"JOB_COMPLETION_INDEX": "3", EnvWorldSize: "4", "MASTER_ADDR": "job-0.job", "MASTER_PORT": "29400", EnvSecret: secret}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    RankEnv
		under   bool
		errWant string
	}{
		{"nothing", map[string]string{}, RankEnv{}, false, ""},
		{"slurm", slurm, RankEnv{Rank: 3, Size: 5, LocalRank: 1, LocalSize: 2, Rendezvous: "node0:29400", Secret: secret}, true, ""},
		{"slurm batch script without a secret", with(slurm, EnvSecret, ""), RankEnv{}, false, ""},
		{"slurm tasks per node of the allocation", with(slurm, "SLURM_STEP_TASKS_PER_NODE", "", "SLURM_TASKS_PER_NODE", "2(x1),3"),
			RankEnv{Rank: 3, Size: 5, LocalRank: 1, LocalSize: 3, Rendezvous: "node0:29400", Secret: secret}, true, ""},
		{"slurm without tasks per node", with(slurm, "SLURM_STEP_TASKS_PER_NODE", ""),
			RankEnv{Rank: 3, Size: 5, LocalRank: 1, LocalSize: 2, Rendezvous: "node0:29400", Secret: secret}, true, ""},
		{"slurm bad tasks per node", with(slurm, "SLURM_STEP_TASKS_PER_NODE", "3(x"), RankEnv{}, true, `SLURM_STEP_TASKS_PER_NODE="3(x"`},
		{"slurm node beyond the list", with(slurm, "SLURM_NODEID", "4"), RankEnv{}, true, "SLURM_NODEID=4"},
		{"slurm without rendezvous", with(slurm, EnvRendezvous, ""), RankEnv{}, true, "started by Slurm but no rendezvous: set HETSYNC_RENDEZVOUS"},
		{"slurm rank out of range", with(slurm, "SLURM_PROCID", "5"), RankEnv{}, true, "started by Slurm: SLURM_PROCID=5: rank must be in [0, 5)"},
		{"slurm ntasks missing", with(slurm, "SLURM_NTASKS", ""), RankEnv{}, true, "SLURM_NTASKS is missing"},
		{"openmpi with secret file", ompi, RankEnv{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Rendezvous: "10.0.0.1:29400", Secret: "abcdabcdabcdabcdabcdabcdabcdabcd"}, true, ""},
		{"openmpi inside a slurm allocation", with(ompi, "SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "0"),
			RankEnv{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Rendezvous: "10.0.0.1:29400", Secret: "abcdabcdabcdabcdabcdabcdabcdabcd"}, true, ""},
		{"openmpi secret file and another secret", with(ompi, EnvSecret, secret), RankEnv{}, true,
			"HETSYNC_JOB_SECRET and HETSYNC_JOB_SECRET_FILE " + secretFile + " are both set and hold different secrets"},
		{"openmpi secret file missing", with(ompi, EnvSecretFile, "/nonexistent/secret"), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE: open /nonexistent/secret"},
		{"openmpi secret file empty", with(ompi, EnvSecretFile, emptyFile), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE " + emptyFile + ": the file is empty"},
		{"openmpi secret file of one byte", with(ompi, EnvSecretFile, shortFile), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE " + shortFile + ": too short (2 hex digits)"},
		{"openmpi secret file not hex", with(ompi, EnvSecretFile, notHexFile), RankEnv{}, true, "HETSYNC_JOB_SECRET_FILE " + notHexFile + ": not a hex string"},
		{"torchrun secret of one byte", with(torch, EnvSecret, "ab"), RankEnv{}, true, "HETSYNC_JOB_SECRET: too short (2 hex digits)"},
		{"openmpi rank not a number", with(ompi, "OMPI_COMM_WORLD_RANK", "x"), RankEnv{}, true, `OMPI_COMM_WORLD_RANK="x": not an integer`},
		{"torchrun", torch, RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret}, true, ""},
		{"torchrun rendezvous override", with(torch, EnvRendezvous, "10.0.0.1:29600"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29600", Secret: secret}, true, ""},
		{"torchrun without local world size", with(torch, "LOCAL_WORLD_SIZE", ""),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret}, true, ""},
		{"torchrun without master port", with(torch, "MASTER_PORT", ""), RankEnv{}, true, "MASTER_ADDR and MASTER_PORT"},
		{"torchrun ipv6 master", with(torch, "MASTER_ADDR", "fd00::1"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "[fd00::1]:29500", Secret: secret}, true, ""},
		{"torchrun bad secret", with(torch, EnvSecret, "not hex"), RankEnv{}, true, "HETSYNC_JOB_SECRET: not a hex string"},
		{"host and hostname", with(torch, EnvHost, "10.0.0.7", EnvHostname, "node7"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret, Host: "10.0.0.7", Hostname: "node7"}, true, ""},
		{"bad host", with(torch, EnvHost, "0.0.0.0"), RankEnv{}, true, "HETSYNC_HOST=\"0.0.0.0\""},
		{"iface", with(torch, EnvIface, "lo"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret, Iface: "lo", Host: "127.0.0.1"}, true, ""},
		{"unknown iface", with(torch, EnvIface, "no-such-if0"), RankEnv{}, true, `HETSYNC_IFACE=no-such-if0: interface "no-such-if0"`},
		{"secret and rendezvous but no rank", map[string]string{EnvSecret: secret, EnvRendezvous: "h:1"}, RankEnv{}, true, "but no launcher's rank variable is"},
		{"secret alone", map[string]string{EnvSecret: secret}, RankEnv{}, false, ""},
		{"kubernetes indexed job", k8s, RankEnv{Rank: 3, Size: 4, LocalRank: 0, LocalSize: 1, Rendezvous: "job-0.job:29400", Secret: secret}, true, ""},
		{"kubernetes index out of range", with(k8s, "JOB_COMPLETION_INDEX", "4"), RankEnv{}, true, "JOB_COMPLETION_INDEX=4: rank must be in [0, 4)"},
		{"kubernetes without a size", with(k8s, EnvWorldSize, ""), RankEnv{}, true, "started by a Kubernetes indexed Job (JOB_COMPLETION_INDEX is set) but HETSYNC_WORLD_SIZE is missing"},
		{"torchrun in a kubernetes pod", with(torch, "JOB_COMPLETION_INDEX", "7"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret}, true, ""},
		{"settings", with(torch, EnvSecurity, "none", EnvDataPath, "tcp", EnvCollective, "ring", EnvJoinTimeout, "90s", EnvPoll, "200us", EnvChecksum, "1"),
			RankEnv{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Rendezvous: "10.0.0.1:29500", Secret: secret,
				Settings: Settings{Collective: "ring", Security: "none", DataPath: "tcp", JoinTimeout: 90 * time.Second, Poll: 200 * time.Microsecond, Checksum: true}}, true, ""},
		{"bad join timeout", with(torch, EnvJoinTimeout, "-3s"), RankEnv{}, true, `rank 1: HETSYNC_JOIN_TIMEOUT="-3s"`},
		{"bad checksum", with(torch, EnvChecksum, "yes please"), RankEnv{}, true, `HETSYNC_CHECKSUM="yes please": want 1 or 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Through RankEnvFromEnviron, as a rank reads it.
			got, under, err := RankEnvFromEnviron(func(k string) string { return tc.env[k] })
			if under != tc.under {
				t.Errorf("adopted = %v, want %v (err %v)", under, tc.under, err)
			}
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("error %v, want %q", err, tc.errWant)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseSlurmTasksPerNode(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"4", []int{4}}, {"2(x3)", []int{2, 2, 2}}, {"2(x2),1,3(x1)", []int{2, 2, 1, 3}},
		{"", nil}, {"x", nil}, {"2(x0)", nil}, {"2(3)", nil}, {"-1", nil},
	}
	for _, tc := range tests {
		got, err := parseSlurmTasksPerNode(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q: got %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestAdoptedRanksFormAJob starts hetsync bench ranks the way srun, mpirun and torchrun would
// (only their environment variables, no hetsync launcher) and checks that they form a job.
func TestAdoptedRanksFormAJob(t *testing.T) {
	bin := hetsyncBinary(t)
	secretFile := filepath.Join(t.TempDir(), "secret")
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		np   int
		env  func(r, np int, port string) []string
	}{
		{"srun", 3, func(r, np int, port string) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=" + strconv.Itoa(np), "SLURM_LOCALID=" + strconv.Itoa(r),
				"SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=" + strconv.Itoa(np), EnvSecret + "=" + secret, EnvRendezvous + "=127.0.0.1:" + port}
		}},
		{"mpirun", 2, func(r, np int, port string) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=" + strconv.Itoa(np),
				"OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE=" + strconv.Itoa(np),
				EnvSecretFile + "=" + secretFile, EnvRendezvous + "=127.0.0.1:" + port}
		}},
		{"torchrun", 2, func(r, np int, port string) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(np), "LOCAL_RANK=" + strconv.Itoa(r),
				"LOCAL_WORLD_SIZE=" + strconv.Itoa(np), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, EnvSecret + "=" + secret}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			argv := append(append([]string{bin}, benchArgs...), "--join-timeout", "60s")
			outs, err := ranktest.Run(ctx, tc.np, argv, func(r int) []string {
				return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, tc.env(r, tc.np, port)...)
			})
			if err != nil {
				t.Fatal(err)
			}
			checkBenchTSV(t, outs[0], tc.np, 3)
		})
	}
}
