package kv

import "fmt"

// DefaultName is the parameter server's service name when Config.Name is empty.
const DefaultName = "kv"

// Config describes the service. Every rank of the job starts the service with the same Len,
// Servers and Name; server ranks also give Init and Rule.
type Config struct {
	// Len is the number of float32 values in the model vector.
	Len int
	// Servers are the ranks hosting shards, in shard order. Empty means rank 0 alone. Listing
	// every rank colocates one shard with each worker.
	Servers []int
	// Init is the initial model (Len values). Required on server ranks; each server copies
	// its shard from it. Other ranks may leave it nil.
	Init []float32
	// Rule builds the update rule of each hosted shard. Required on server ranks.
	Rule RuleFactory
	// Name is the service's name on the service layer (package service), which gives it its
	// channel: two parameter servers on one endpoint need two names. Empty means DefaultName.
	Name string
	// SSP, when set, is the stale-synchronous gate of the servers: a request that pulls
	// (Pull, PushPull) from a worker more than SSP.Staleness clocks ahead of the slowest
	// worker is answered only once the slowest catches up, or once training stops. Pushes
	// are never held. Nil means no gate.
	SSP *SSPGate
}

// SSPGate is the bound of stale synchronous parallel: worker i's pull is answered only while
// c_i − min_j c_j ≤ Staleness, with c the clocks the workers sent (Staleness 0 is BSP). A
// worker that said bye leaves the minimum.
type SSPGate struct {
	Staleness uint64
}

// Blocked says whether a worker at clock is held when the slowest worker is at minClock.
func (g SSPGate) Blocked(clock, minClock uint64) bool {
	return clock > minClock && clock-minClock > g.Staleness
}

// Validate checks the configuration for a job of size ranks as seen by rank.
func (c Config) Validate(rank, size int) error {
	if size < 1 {
		return fmt.Errorf("kv: job size must be ≥ 1, got %d", size)
	}
	if rank < 0 || rank >= size {
		return fmt.Errorf("kv: rank %d out of range [0, %d)", rank, size)
	}
	if c.Len < 0 {
		return fmt.Errorf("kv: rank %d: model length must be ≥ 0, got %d", rank, c.Len)
	}
	seen := make(map[int]bool, len(c.Servers))
	for _, s := range c.Servers {
		if s < 0 || s >= size {
			return fmt.Errorf("kv: rank %d: server rank %d out of range [0, %d)", rank, s, size)
		}
		if seen[s] {
			return fmt.Errorf("kv: rank %d: server rank %d listed twice", rank, s)
		}
		seen[s] = true
	}
	if len(c.Servers) == 0 {
		seen[0] = true
	}
	if seen[rank] {
		if len(c.Init) != c.Len {
			return fmt.Errorf("kv: rank %d hosts a shard but Init has %d values, want Len=%d", rank, len(c.Init), c.Len)
		}
		if c.Rule == nil {
			return fmt.Errorf("kv: rank %d hosts a shard but no update rule was given", rank)
		}
	}
	return nil
}

// Reply is what a client call learned from the servers.
type Reply struct {
	// Stop is set once rank 0 (or any rank) voted to stop through any server.
	Stop bool
	// Version is the largest shard version seen (updates published by that shard).
	Version uint64
	// MinClock is the smallest worker clock the servers know.
	MinClock uint64
	// Staleness is the largest staleness of this push over the shards: updates published
	// between this worker's last pull and this push. Zero for a pull.
	Staleness uint64
	// Fresh is the number of shards whose values were copied into the caller's vector: all
	// of them for Pull and PushPull, those with a version the worker had not pulled yet for
	// PushPullIfNewer (Service.Fresh says which).
	Fresh int
	// ClockSum is the sum of the clocks of all workers as the servers know them (the largest
	// over the shards): with clocks counting completed steps, the job's steps so far.
	ClockSum uint64
}
