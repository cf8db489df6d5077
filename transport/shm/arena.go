package shm

import "time"

// ArenaOptions configure CreateArena and OpenArena. Ranks and Rank are required.
type ArenaOptions struct {
	// Dir is the directory of the file; DefaultDir when "".
	Dir string
	// Ranks is the number of ranks of the job (each has a slot in the header), Rank this
	// process's rank among them.
	Ranks, Rank int
	// Spin lets Wait poll its word a few hundred nanoseconds before it sleeps: worth it only
	// when every rank has a core of its own, since otherwise the rank that would change the
	// word is waiting for the spinner's core.
	Spin bool
	// Poll, when positive, lets Wait look at its word for up to this long before it sleeps,
	// yielding the CPU between looks (sched_yield), as a pipe's receiver polls its ring. On a
	// host whose ranks outnumber the cores a sleeping rank waits tens of microseconds for
	// its wake-up, and a barrier pays one per rank; a yielding rank hands its core to the
	// ranks still working and takes it back as soon as the word changes. Up to Poll of CPU per
	// wait: jobs that share their host with other work keep it 0.
	Poll time.Duration
	// Gone, when set, is the caller's own verdict on the job's ranks (heartbeats, broken
	// links): Wait calls it whenever a sleep times out and returns its error when it has one.
	// It must be cheap and must not block.
	Gone func() error
}

// Limits of an arena: its data bytes and its ranks.
const (
	MaxArenaBytes = 1 << 40
	MaxArenaRanks = 1 << 16
)
