package trainer

import (
	"fmt"
	"math"
	"time"
)

// PSSyncConfig holds the settings of the parameter-server strategies of wbsp.go,
// wbsp_opt.go, dcasgd.go and ssp.go (the `hetsync train` flags of cmd/hetsync/train_ps.go).
type PSSyncConfig struct {
	// WBSPApply is "buffered" (the paper: deltas accumulate and the slowest worker's upload
	// publishes them) or "immediate" (the code: each delta lands at once).
	WBSPApply string `json:"wbsp_apply,omitempty"`
	// WBSPSlowRank pins the worker whose upload triggers the global update (the code: rank 1);
	// nil detects the slowest from the upload intervals.
	WBSPSlowRank *int `json:"wbsp_slow_rank,omitempty"`
	// DCASGDVariant is "paper" (per-worker backups) or "mxnet" (one shared previous weight,
	// MXNet's optimizer.DCASGD as ESync ran it).
	DCASGDVariant string `json:"dcasgd_variant,omitempty"`
	// DCASGDLambda is λ of the delay compensation. 0 means 0.04 (MXNet's default).
	DCASGDLambda float64 `json:"dcasgd_lambda,omitempty"`
	// Staleness is SSP's bound s; nil means 40 (WBSP's SSP baseline).
	Staleness *int `json:"staleness,omitempty"`
	// PSRanks are the ranks hosting the parameter-server shards, in shard order; empty means
	// ranks 0..PSServers-1. A server shares its rank's cores with that rank's worker: on a
	// shared host, a rank that mostly waits (a slowed worker) answers sooner than rank 0, which
	// also trains at full speed and evaluates (the originals run the server as a process of
	// its own).
	PSRanks []int `json:"ps_ranks,omitempty"`
	// SSPPull is "every" (textbook: pull every step, block while more than s ahead) or "lazy"
	// (the ADSP code: push Δ every step, pull only when at least s ahead).
	SSPPull string `json:"ssp_pull,omitempty"`
}

// ServerRanks are the ranks hosting the parameter-server shards, in shard order: PSSync.PSRanks,
// or ranks 0..PSServers-1 (rank 0 alone by default).
func (c *Config) ServerRanks() []int {
	if len(c.PSSync.PSRanks) > 0 {
		return append([]int(nil), c.PSSync.PSRanks...)
	}
	servers := make([]int, max(1, c.PSServers))
	for i := range servers {
		servers[i] = i
	}
	return servers
}

// Defaults of the parameter-server strategies.
const (
	DefaultDCASGDLambda = 0.04
	DefaultStaleness    = 40
)

// PSSyncDefaults fills c.PSSync's zero fields; Config.Defaults calls it.
func (c *Config) PSSyncDefaults() {
	p := &c.PSSync
	if p.WBSPApply == "" {
		p.WBSPApply = "buffered"
	}
	if p.DCASGDVariant == "" {
		p.DCASGDVariant = "paper"
	}
	if p.DCASGDLambda == 0 {
		p.DCASGDLambda = DefaultDCASGDLambda
	}
	if p.SSPPull == "" {
		p.SSPPull = "every"
	}
}

// StalenessBound is SSP's s.
func (p PSSyncConfig) StalenessBound() int {
	if p.Staleness == nil {
		return DefaultStaleness
	}
	return *p.Staleness
}

// validatePSSync checks c.PSSync for a job of size ranks; Config.Validate calls it.
func (c *Config) validatePSSync(size int) error {
	p := c.PSSync
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
	switch {
	case len(p.PSRanks) > 0 && c.PSServers > 0:
		return fmt.Errorf("trainer: give --ps-ranks (the server ranks) or --ps-servers (ranks 0..N-1), not both")
	case p.WBSPApply != "" && p.WBSPApply != "buffered" && p.WBSPApply != "immediate":
		return fmt.Errorf("trainer: --wbsp-apply must be buffered or immediate, got %q", p.WBSPApply)
	case p.WBSPSlowRank != nil && (*p.WBSPSlowRank < 0 || *p.WBSPSlowRank >= size):
		return fmt.Errorf("trainer: --wbsp-slow-rank must be a rank in [0, %d), got %d", size, *p.WBSPSlowRank)
	case p.DCASGDVariant != "" && p.DCASGDVariant != "paper" && p.DCASGDVariant != "mxnet":
		return fmt.Errorf("trainer: --dcasgd-variant must be paper or mxnet, got %q", p.DCASGDVariant)
	case p.DCASGDLambda < 0 || math.IsNaN(p.DCASGDLambda) || math.IsInf(p.DCASGDLambda, 0):
		return fmt.Errorf("trainer: --dcasgd-lambda must be a finite number ≥ 0, got %v", p.DCASGDLambda)
	case p.Staleness != nil && *p.Staleness < 0:
		return fmt.Errorf("trainer: --staleness must be ≥ 0, got %d", *p.Staleness)
	case p.SSPPull != "" && p.SSPPull != "every" && p.SSPPull != "lazy":
		return fmt.Errorf("trainer: --ssp-pull must be every or lazy, got %q", p.SSPPull)
	case p.SSPPull == "lazy" && p.StalenessBound() < 1:
		return fmt.Errorf("trainer: --ssp-pull lazy pulls when a worker is ≥ s steps ahead, so it needs --staleness ≥ 1, got %d", p.StalenessBound())
	}
	return nil
}

// heteroFactor is the per-step sleep of WBSP's heterogeneity settings H1–H3 (see
// docs/algorithms.md#heterogeneity-injection) in units of the fast step time: the odd ranks sleep {5, 10, 15}× t_fast (the
// original: 0.5, 1.0 and 1.5 s against a fast step of tens of milliseconds).
func heteroFactor(profile string) (float64, bool) {
	switch profile {
	case "h1":
		return 5, true
	case "h2":
		return 10, true
	case "h3":
		return 15, true
	}
	return 0, false
}

// HeteroProfileSleep returns Config.StepSleep for profile (h1, h2 or h3) in a job of size
// ranks whose fast step takes tFast: odd ranks sleep factor×tFast per step, even ranks none.
func HeteroProfileSleep(profile string, size int, tFast time.Duration) ([]time.Duration, error) {
	f, ok := heteroFactor(profile)
	if !ok {
		return nil, fmt.Errorf("trainer: --hetero-profile must be h1, h2 or h3, got %q", profile)
	}
	if size < 1 {
		return nil, fmt.Errorf("trainer: --hetero-profile needs the number of ranks, got %d", size)
	}
	if tFast <= 0 {
		return nil, fmt.Errorf("trainer: --hetero-profile %s needs a positive fast step time, got %v", profile, tFast)
	}
	out := make([]time.Duration, size)
	for r := 1; r < size; r += 2 {
		out[r] = time.Duration(f * float64(tFast))
	}
	return out, nil
}

// Factories of the parameter-server strategies, registered in strategyTable.
func newWBSP(*Config) (Strategy, error)    { return &wbsp{}, nil }
func newWBSPOpt(*Config) (Strategy, error) { return &wbspOpt{}, nil }
func newDCASGD(*Config) (Strategy, error)  { return &dcasgd{}, nil }
func newSSP(*Config) (Strategy, error)     { return &ssp{}, nil }
