package launcher

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Variables through which ranks started by other launchers get the job secret and the
// rendezvous.
const (
	// EnvSecretFile names a file holding the job secret (hex), as an alternative to
	// HETSYNC_JOB_SECRET that keeps the secret out of process listings and job specs.
	EnvSecretFile = "HETSYNC_JOB_SECRET_FILE"
)

// adoptSource is one launcher whose environment a rank can adopt.
type adoptSource struct {
	name string
	// rank, size, localRank and localSize are the variable names; localSize may be empty
	// (Slurm: read from its tasks-per-node list). An empty localRank means one rank per host
	// (a Kubernetes pod): local rank 0 of 1.
	rank, size, localRank, localSize string
}

// adoptSources in the order they are tried: Open MPI first (its variables are set only in
// processes mpirun started, even inside a Slurm allocation), then torchrun, then Slurm (whose
// SLURM_PROCID is also set in a batch script and around torchrun agents), then a Kubernetes
// indexed Job, whose completion index every process of the pod inherits, torchrun's workers
// included. Kubernetes has no variable for the number of pods: the Job's spec sets
// HETSYNC_WORLD_SIZE to its completions.
var adoptSources = [...]adoptSource{
	{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
	{"a Kubernetes indexed Job", "JOB_COMPLETION_INDEX", EnvWorldSize, "", ""},
}

// AdoptRankEnv reads the rank environment of a process that Slurm (srun), Open MPI (mpirun),
// torchrun or a Kubernetes indexed Job started: rank, world size and local rank from their variables, the job secret
// from HETSYNC_JOB_SECRET or the file named by HETSYNC_JOB_SECRET_FILE, and the rendezvous
// from HETSYNC_RENDEZVOUS or torchrun's MASTER_ADDR and MASTER_PORT. HETSYNC_HOSTNAME,
// HETSYNC_IFACE and HETSYNC_HOST are honoured as for launched ranks.
//
// The job secret is the opt-in: without one the bool is false and there is no error, so a
// command run by hand inside a Slurm batch script (where SLURM_PROCID is set too) still acts
// as a launcher. With a secret but no launcher variables, or with a launcher's variables but
// no rendezvous, the error says what is missing. readFile is os.ReadFile in a real rank.
func AdoptRankEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (RankEnv, bool, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	secret, secretFrom, err := jobSecret(get, readFile)
	if err != nil {
		return RankEnv{}, true, err
	}
	var src *adoptSource
	for i := range adoptSources {
		if get(adoptSources[i].rank) != "" {
			src = &adoptSources[i]
			break
		}
	}
	if secret == "" {
		return RankEnv{}, false, nil
	}
	if src == nil {
		if get(EnvRendezvous) == "" {
			return RankEnv{}, false, nil // a secret alone (e.g. exported for a later launch) starts nothing
		}
		return RankEnv{}, true, fmt.Errorf("%s and %s are set but no launcher's rank variable is (%s, OMPI_COMM_WORLD_RANK, RANK, SLURM_PROCID or JOB_COMPLETION_INDEX)",
			secretFrom, EnvRendezvous, EnvRank)
	}
	if err := CheckSecret(secretFrom, secret); err != nil {
		return RankEnv{}, true, err
	}
	e := RankEnv{Secret: secret}
	ints := []struct {
		name string
		dst  *int
	}{{src.rank, &e.Rank}, {src.size, &e.Size}, {src.localRank, &e.LocalRank}}
	for _, v := range ints {
		if v.name == "" {
			continue // no local rank variable: one rank per host, local rank 0
		}
		s := get(v.name)
		if s == "" {
			return RankEnv{}, true, fmt.Errorf("started by %s (%s is set) but %s is missing", src.name, src.rank, v.name)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return RankEnv{}, true, fmt.Errorf("%s=%q: not an integer", v.name, s)
		}
		*v.dst = n
	}
	localSize, err := adoptLocalSize(get, *src)
	if err != nil {
		return RankEnv{}, true, err
	}
	e.LocalSize = localSize
	if e.LocalSize == 0 {
		e.LocalSize = e.LocalRank + 1 // unknown: the smallest consistent value
	}
	e.Rendezvous = get(EnvRendezvous)
	if e.Rendezvous == "" {
		addr, port := get("MASTER_ADDR"), get("MASTER_PORT")
		if addr == "" || port == "" {
			return RankEnv{}, true, fmt.Errorf("started by %s but no rendezvous: set %s=HOST:PORT (rank 0's host and a free port) or MASTER_ADDR and MASTER_PORT",
				src.name, EnvRendezvous)
		}
		e.Rendezvous = net.JoinHostPort(addr, port)
	}
	if err := e.Validate(); err != nil {
		return RankEnv{}, true, fmt.Errorf("started by %s: %s", src.name, adoptNames(err.Error(), *src))
	}
	if err := e.readOptional(getenv); err != nil {
		return RankEnv{}, true, err
	}
	return e, true, nil
}

// jobSecret is the job secret from HETSYNC_JOB_SECRET or the file HETSYNC_JOB_SECRET_FILE
// names, and where it came from (for errors); "" when neither is set. Both set with different
// secrets is an error naming both: which one the job meant cannot be guessed, and ranks that
// guessed differently would fail to join with a less helpful message.
func jobSecret(get func(string) string, readFile func(string) ([]byte, error)) (secret, from string, err error) {
	secret, path := get(EnvSecret), get(EnvSecretFile)
	if path == "" {
		return secret, EnvSecret, nil
	}
	b, err := readFile(path)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", EnvSecretFile, err)
	}
	fromFile := strings.TrimSpace(string(b))
	from = EnvSecretFile + " " + path
	if fromFile == "" {
		return "", "", fmt.Errorf("%s: the file is empty", from)
	}
	if secret != "" && !strings.EqualFold(secret, fromFile) {
		return "", "", fmt.Errorf("%s and %s are both set and hold different secrets: set only one", EnvSecret, from)
	}
	return fromFile, from, nil
}

// adoptNames rewrites RankEnv.Validate's message to the variable names the launcher set.
func adoptNames(msg string, src adoptSource) string {
	r := strings.NewReplacer(EnvRank+"=", src.rank+"=", EnvWorldSize+"=", src.size+"=", EnvLocalRank+"=", src.localRank+"=",
		EnvLocalSize+"=", "local size ")
	return r.Replace(msg)
}

// adoptLocalSize is the number of ranks on this host, or 0 when the launcher does not say.
func adoptLocalSize(get func(string) string, src adoptSource) (int, error) {
	if src.localRank == "" {
		return 1, nil
	}
	if src.localSize != "" {
		s := get(src.localSize)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: not an integer", src.localSize, s)
		}
		return n, nil
	}
	// Slurm: SLURM_STEP_TASKS_PER_NODE (srun's step) or SLURM_TASKS_PER_NODE, e.g. "2(x3),1",
	// indexed by SLURM_NODEID.
	name := "SLURM_STEP_TASKS_PER_NODE"
	list := get(name)
	if list == "" {
		name = "SLURM_TASKS_PER_NODE"
		list = get(name)
	}
	node := get("SLURM_NODEID")
	if list == "" || node == "" {
		return 0, nil
	}
	id, err := strconv.Atoi(node)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("SLURM_NODEID=%q: not a node index", node)
	}
	counts, err := parseSlurmTasksPerNode(list)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", name, list, err)
	}
	if id >= len(counts) {
		return 0, fmt.Errorf("SLURM_NODEID=%d but %s=%q lists %d node(s)", id, name, list, len(counts))
	}
	return counts[id], nil
}

// parseSlurmTasksPerNode expands Slurm's compressed list: "2(x3),1" is [2 2 2 1].
func parseSlurmTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		n, rep := item, "1"
		if i := strings.Index(item, "(x"); i >= 0 {
			if !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("%q: want N or N(xM)", item)
			}
			n, rep = item[:i], item[i+2:len(item)-1]
		}
		tasks, err1 := strconv.Atoi(n)
		times, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || tasks < 0 || times < 1 || times > 1<<20 {
			return nil, fmt.Errorf("%q: want N or N(xM)", item)
		}
		for ; times > 0; times-- {
			out = append(out, tasks)
		}
	}
	return out, nil
}

// readOptional fills Hostname, Iface and Host from HETSYNC_HOSTNAME, HETSYNC_IFACE and
// HETSYNC_HOST, resolving the interface's address on this machine, and Settings from theirs.
func (e *RankEnv) readOptional(getenv func(string) string) error {
	s, err := SettingsFromEnviron(getenv)
	if err != nil {
		return fmt.Errorf("rank %d: %w", e.Rank, err)
	}
	e.Settings = s
	e.Hostname = strings.TrimSpace(getenv(EnvHostname))
	e.Iface = strings.TrimSpace(getenv(EnvIface))
	e.Host = strings.TrimSpace(getenv(EnvHost))
	if e.Host != "" {
		if ip := net.ParseIP(e.Host); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("%s=%q: want the IP address this rank's peers can reach", EnvHost, e.Host)
		}
		return nil
	}
	if e.Iface != "" {
		ip, err := InterfaceIP(e.Iface)
		if err != nil {
			return fmt.Errorf("rank %d: %s=%s: %w", e.Rank, EnvIface, e.Iface, err)
		}
		e.Host = ip
	}
	return nil
}

// InterfaceIP returns the first IPv4 address of the named network interface on this machine
// (an IPv6 one when it has no IPv4 address), the address a rank advertises for --iface.
func InterfaceIP(name string) (string, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("interface %q: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", fmt.Errorf("interface %q: %w", name, err)
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == "" {
			v6 = n.IP.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	return "", errors.New("interface " + strconv.Quote(name) + " has no usable IP address")
}

// ForeignLauncher names the launcher whose rank variables are set in this process (Open MPI,
// torchrun, Slurm, a Kubernetes indexed Job) and the world size it gives (0 when unset or not
// a number), or "" when none is. A rank program uses it to refuse to run alone when
// AdoptRankEnv did not adopt it (no job secret) although it is one of several ranks.
func ForeignLauncher(getenv func(string) string) (name string, size int) {
	for _, src := range adoptSources {
		if strings.TrimSpace(getenv(src.rank)) != "" {
			n, _ := strconv.Atoi(strings.TrimSpace(getenv(src.size)))
			return src.name, n
		}
	}
	return "", 0
}
