package trainer

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Flag values that strategies' options need beyond the flag package's own.

// optionalFloat is a *float64 option: nil until the flag is given ("default: derived").
type optionalFloat struct{ p **float64 }

func (v optionalFloat) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return strconv.FormatFloat(**v.p, 'g', -1, 64)
}

func (v optionalFloat) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v.p = &f
	return nil
}

func (v optionalFloat) Get() any {
	if *v.p == nil {
		return 0.0
	}
	return **v.p
}

// optionalInt is a *int option whose flag takes a negative number for nil.
type optionalInt struct{ p **int }

func (v optionalInt) String() string {
	if v.p == nil || *v.p == nil {
		return "-1"
	}
	return strconv.Itoa(**v.p)
}

func (v optionalInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	if n < 0 {
		*v.p = nil
		return nil
	}
	*v.p = &n
	return nil
}

func (v optionalInt) Get() any {
	if *v.p == nil {
		return -1
	}
	return **v.p
}

// rankList is a comma-separated list of ranks ("1,3").
type rankList struct {
	p    *[]int
	name string
}

func (v rankList) String() string {
	if v.p == nil {
		return ""
	}
	s := make([]string, len(*v.p))
	for i, r := range *v.p {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

func (v rankList) Set(s string) error {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--%s %q: %q is not a rank number", v.name, s, f)
		}
		out = append(out, r)
	}
	*v.p = out
	return nil
}

func (v rankList) Get() any { return v.String() }

// PSPlacement says which ranks host the parameter-server shards; the options of every
// parameter-server strategy embed it.
type PSPlacement struct {
	// PSServers puts the shards on ranks 0..PSServers-1; 0 means 1 (rank 0 alone).
	PSServers int `json:"ps_servers,omitempty"`
	// PSRanks are the ranks hosting the shards, in shard order; it excludes PSServers. A
	// server shares its rank's cores with that rank's worker: on a shared host, a rank that
	// mostly waits (a slowed worker) answers sooner than rank 0, which also trains at full
	// speed and evaluates (the originals run the server as a process of its own).
	PSRanks []int `json:"ps_ranks,omitempty"`
}

// Flags declares --ps-servers and --ps-ranks.
func (p *PSPlacement) Flags(fs *flag.FlagSet) {
	fs.IntVar(&p.PSServers, "ps-servers", p.PSServers, "ranks 0..N-1 host parameter-server shards (0 = rank 0)")
	fs.Var(rankList{p: &p.PSRanks, name: "ps-ranks"}, "ps-ranks", "the ranks hosting parameter-server shards, comma-separated, e.g. 3 or 1,3 (default: ranks 0..--ps-servers-1)")
}

// Validate checks the placement for a job of size ranks.
func (p *PSPlacement) Validate(size int) error {
	if p.PSServers < 0 || p.PSServers > size {
		return fmt.Errorf("trainer: --ps-servers must be in [0, %d] for %d ranks, got %d", size, size, p.PSServers)
	}
	seen := make(map[int]bool, len(p.PSRanks))
	for _, r := range p.PSRanks {
		if r < 0 || r >= size {
			return fmt.Errorf("trainer: --ps-ranks: rank %d out of range [0, %d)", r, size)
		}
		if seen[r] {
			return fmt.Errorf("trainer: --ps-ranks: rank %d listed twice", r)
		}
		seen[r] = true
	}
	if len(p.PSRanks) > 0 && p.PSServers > 0 {
		return fmt.Errorf("trainer: give --ps-ranks (the server ranks) or --ps-servers (ranks 0..N-1), not both")
	}
	return nil
}

// ServerRanks are the ranks hosting the shards, in shard order: PSRanks, or ranks
// 0..PSServers-1 (rank 0 alone by default).
func (p *PSPlacement) ServerRanks() []int {
	if len(p.PSRanks) > 0 {
		return append([]int(nil), p.PSRanks...)
	}
	servers := make([]int, max(1, p.PSServers))
	for i := range servers {
		servers[i] = i
	}
	return servers
}

// placement is the server placement of cfg's options: rank 0 alone for options without one.
func placement(cfg *Config) []int {
	if p, ok := cfg.Options.(interface{ ServerRanks() []int }); ok {
		return p.ServerRanks()
	}
	return []int{0}
}
