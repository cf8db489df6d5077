package shm

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
