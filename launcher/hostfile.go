package launcher

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// LocalHostName is the host name that means "this machine, without SSH". Any other name
// (127.0.0.1 included) is reached over SSH.
const LocalHostName = "localhost"

// Host is one machine of a multi-host job and how many ranks it takes.
type Host struct {
	// Name is the address the launcher connects to (a DNS name or an IP). It also names the
	// host in the ranks' environment (HETSYNC_HOSTNAME), so ranks with the same Name share
	// the same-host data path.
	Name string
	// User overrides the SSH user for this host ("user@host" in a host list); empty means the
	// job's default.
	User string
	// Slots is how many ranks the host takes before it counts as oversubscribed.
	Slots int
}

// Local reports whether the host is this machine, started without SSH.
func (h Host) Local() bool { return h.Name == LocalHostName }

func (h Host) String() string {
	if h.User != "" {
		return h.User + "@" + h.Name
	}
	return h.Name
}

// ParseHostList parses Horovod's -H syntax: "host1:2,host2:2", where a host without ":N" has
// one slot. A host may be written user@host. A host named twice gets the sum of its slots.
func ParseHostList(s string) ([]Host, error) {
	var hosts []Host
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		h, err := parseHostSlots(item)
		if err == nil {
			hosts, err = mergeHost(hosts, h)
		}
		if err != nil {
			return nil, fmt.Errorf("-H %q: %v", s, err)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("-H %q: no hosts", s)
	}
	return hosts, nil
}

// parseHostSlots parses "host", "host:N" or "user@host:N". IPv6 addresses go in brackets:
// "[fe80::1]:2".
func parseHostSlots(item string) (Host, error) {
	name, slots := item, 1
	if strings.HasPrefix(strings.TrimPrefix(name, userPart(name)), "[") {
		rest := strings.TrimPrefix(name, userPart(name))
		end := strings.Index(rest, "]")
		if end < 0 {
			return Host{}, fmt.Errorf("host %q: unterminated [", item)
		}
		if tail := rest[end+1:]; tail != "" {
			if !strings.HasPrefix(tail, ":") {
				return Host{}, fmt.Errorf("host %q: want [ADDRESS]:SLOTS", item)
			}
			n, err := parseSlots(tail[1:])
			if err != nil {
				return Host{}, fmt.Errorf("host %q: %v", item, err)
			}
			slots = n
		}
		name = userPart(name) + rest[1:end]
	} else if i := strings.LastIndex(name, ":"); i >= 0 {
		n, err := parseSlots(name[i+1:])
		if err != nil {
			return Host{}, fmt.Errorf("host %q: %v", item, err)
		}
		name, slots = name[:i], n
	}
	return newHost(name, slots)
}

// userPart returns "user@" of "user@host...", or "".
func userPart(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		return s[:i+1]
	}
	return ""
}

// MaxSlots bounds a host's slots, alone or summed over its lines: far beyond the ranks any
// machine runs, low enough that counting and placing ranks cannot overflow or exhaust memory.
const MaxSlots = 1 << 16

func parseSlots(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxSlots {
		return 0, fmt.Errorf("slots %q: want a whole number in [1, %d]", s, MaxSlots)
	}
	return n, nil
}

func newHost(name string, slots int) (Host, error) {
	var h Host
	if u, n, ok := strings.Cut(name, "@"); ok {
		if u == "" {
			return h, fmt.Errorf("host %q: empty user before @", name)
		}
		h.User, name = u, n
	}
	if name == "" {
		return h, fmt.Errorf("empty host name")
	}
	bad := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("/@,", r) }
	if strings.ContainsFunc(name, bad) {
		return h, fmt.Errorf("host name %q contains a space, a control character, '/', '@' or ','", name)
	}
	if strings.ContainsFunc(h.User, bad) {
		return h, fmt.Errorf("user %q of host %s contains a space, a control character, '/', '@' or ','", h.User, name)
	}
	h.Name, h.Slots = name, slots
	return h, nil
}

func mergeHost(hosts []Host, h Host) ([]Host, error) {
	for i := range hosts {
		if hosts[i].Name == h.Name && hosts[i].User == h.User {
			if hosts[i].Slots+h.Slots > MaxSlots {
				return nil, fmt.Errorf("host %s: %d slots in all, more than %d", h, hosts[i].Slots+h.Slots, MaxSlots)
			}
			hosts[i].Slots += h.Slots
			return hosts, nil
		}
	}
	return append(hosts, h), nil
}

// ParseHostfile reads a hostfile. Each line names one host, in Open MPI's syntax
// ("node1 slots=4", optionally "max_slots=N", which is accepted and ignored) or Horovod's
// ("node1:4"); a bare host name has one slot. '#' starts a comment; blank lines are skipped.
// name is the file name for error messages.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h, err := parseHostfileLine(fields)
		if err == nil {
			hosts, err = mergeHost(hosts, h)
		}
		if err != nil {
			return nil, fmt.Errorf("hostfile %s:%d: %v", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hostfile %s: %w", name, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("hostfile %s: no hosts", name)
	}
	return hosts, nil
}

func parseHostfileLine(fields []string) (Host, error) {
	if len(fields) == 1 {
		return parseHostSlots(fields[0])
	}
	slots := 1
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Host{}, fmt.Errorf("%q: want KEY=VALUE after the host name (slots=N)", f)
		}
		switch k {
		case "slots", "cpu", "count":
			n, err := parseSlots(v)
			if err != nil {
				return Host{}, fmt.Errorf("%s: %v", f, err)
			}
			slots = n
		case "max_slots", "max-slots":
			if _, err := parseSlots(v); err != nil {
				return Host{}, fmt.Errorf("%s: %v", f, err)
			}
		default:
			return Host{}, fmt.Errorf("unknown key %q (known: slots, max_slots)", k)
		}
	}
	if strings.Contains(fields[0], ":") && !strings.HasPrefix(strings.TrimPrefix(fields[0], userPart(fields[0])), "[") {
		return Host{}, fmt.Errorf("%q: give the slots either as host:N or as slots=N, not both", strings.Join(fields, " "))
	}
	return newHost(strings.Trim(fields[0], "[]"), slots)
}

// ReadHostfile reads and parses the hostfile at path.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--hostfile: %w", err)
	}
	defer f.Close()
	return ParseHostfile(f, path)
}

// Slot is where one rank runs.
type Slot struct {
	// Host is the index of the rank's host in the host list.
	Host int
	// LocalRank and LocalSize place the rank among the ranks of its host.
	LocalRank, LocalSize int
}

// Place maps np ranks onto hosts, filling each host's slots in order (ranks 0..s0-1 on the
// first host, and so on). More ranks than slots is an error unless oversubscribe is set; then
// the extra ranks are dealt out again in the same proportions, host by host. Ranks on one host
// are always consecutive. np 0 means every slot.
func Place(hosts []Host, np int, oversubscribe bool) ([]Slot, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no hosts to place ranks on")
	}
	total := 0
	for _, h := range hosts {
		if h.Slots < 1 {
			return nil, fmt.Errorf("host %s: %d slots", h, h.Slots)
		}
		total += h.Slots
	}
	if np == 0 {
		np = total
	}
	if np < 0 {
		return nil, fmt.Errorf("-np %d: need at least 1 rank", np)
	}
	if np > len(hosts)*MaxSlots {
		return nil, fmt.Errorf("-np %d: more than %d ranks on each of the %d host(s), even oversubscribed", np, MaxSlots, len(hosts))
	}
	if np > total && !oversubscribe {
		return nil, fmt.Errorf("-np %d: more ranks than the %d slots of %d host(s) (%s); add hosts or slots, or pass --oversubscribe",
			np, total, len(hosts), describeHosts(hosts))
	}
	counts := make([]int, len(hosts))
	left := np
	for left > 0 {
		for i, h := range hosts {
			n := min(h.Slots, left)
			counts[i] += n
			left -= n
		}
	}
	slots := make([]Slot, 0, np)
	for i, n := range counts {
		for l := 0; l < n; l++ {
			slots = append(slots, Slot{Host: i, LocalRank: l, LocalSize: n})
		}
	}
	return slots, nil
}

func describeHosts(hosts []Host) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h.String() + ":" + strconv.Itoa(h.Slots)
	}
	return strings.Join(parts, ",")
}

// validatePlacement checks Job.Hosts and Job.Placement against each other and NP.
func (j *Job) validatePlacement() error {
	if j.Placement == nil {
		if len(j.Hosts) > 0 {
			return fmt.Errorf("%d host(s) given but no placement of the ranks on them (launcher.Place)", len(j.Hosts))
		}
		return nil
	}
	if len(j.Placement) != j.NP {
		return fmt.Errorf("placement of %d rank(s) for -np %d", len(j.Placement), j.NP)
	}
	for r, s := range j.Placement {
		if s.Host < 0 || s.Host >= len(j.Hosts) {
			return fmt.Errorf("rank %d placed on host #%d of %d", r, s.Host, len(j.Hosts))
		}
		if s.LocalSize < 1 || s.LocalRank < 0 || s.LocalRank >= s.LocalSize || s.LocalSize > j.NP {
			return fmt.Errorf("rank %d: local rank %d of %d on host %s", r, s.LocalRank, s.LocalSize, j.Hosts[s.Host])
		}
	}
	return nil
}

// rankEnv is the environment of rank r.
func (j *Job) rankEnv(r int, rdv, secret string) RankEnv {
	e := RankEnv{Rank: r, Size: j.NP, LocalRank: r, LocalSize: j.NP, Rendezvous: rdv, Secret: secret, Iface: j.Iface, Settings: j.Settings}
	if j.Placement != nil {
		s := j.Placement[r]
		e.LocalRank, e.LocalSize, e.Hostname = s.LocalRank, s.LocalSize, j.Hosts[s.Host].Name
	}
	return e
}

// hostName is rank r's host, or "" when every rank runs on this machine.
func (j *Job) hostName(r int) string {
	if j.Placement == nil {
		return ""
	}
	return j.Hosts[j.Placement[r].Host].Name
}

// onHost is " on host H" for messages, or "".
func (j *Job) onHost(r int) string {
	if h := j.hostName(r); h != "" {
		return " on host " + h
	}
	return ""
}
