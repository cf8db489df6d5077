package p2p

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// The arena (transport.Arena) of a one-host job is agreed on while the job forms, over the data
// connections between rank 0 and every other rank, before the framing starts on them:
//
//  1. rank 0 sends every rank an offer: the name and size of the arena file it created, or no
//     name (it proved not every rank on its host, it could not create one, or it has none
//     configured);
//  2. every rank maps an offered arena if it wants one (it proved every rank on its host and
//     has one configured) and answers whether it did, and if not, why;
//  3. rank 0 unlinks the file and sends every rank the verdict: use it only when every rank
//     mapped it, else none; a rank that gets no verdict fails its join.
//
// So every rank has one or none has, which a collective that picks its algorithm by it needs.
// The exchange runs whenever the job's data path may take shared memory ("auto", "shm",
// "cma", which every rank has alike, checked at the rendezvous), so every rank knows whether
// to expect it.

// DefaultArenaBytes is the size of a job's arena when Config.ArenaBytes is 0: what the
// collectives over the arena lay out at their largest slots (transport.ArenaBytesFor: 11 MiB
// at 4 ranks, 35 MiB at 16, 521 MiB at 64). Pages cost memory only when a collective touches
// them. Rank 0 takes less when the shared-memory directory has less free (fitArenaBytes).
func DefaultArenaBytes(size int) int64 { return transport.ArenaBytesFor(size) }

// minDefaultArenaBytes is the least a default arena shrinks to: 1 MiB per rank and 4 MiB
// more, slots of about 256 KiB.
func minDefaultArenaBytes(size int) int64 { return int64(size+4) << 20 }

// fitArenaBytes is the default arena's size on a file system with free bytes free: the
// default, or half of free when that is less (a container's 64 MiB /dev/shm holds the rings of
// the job's pipes too), but never below minDefaultArenaBytes, which the arena's creation then
// refuses when it does not fit either. free < 0 (unknown) leaves the default.
func fitArenaBytes(size int, free int64) int64 {
	want := DefaultArenaBytes(size)
	if free < 0 || want <= free/2 {
		return want
	}
	return max(free/2, minDefaultArenaBytes(size))
}

// arenaOffer, arenaAnswer and arenaVerdict are the three messages of the exchange.
type arenaOffer struct {
	Name  string `json:"name,omitempty"` // "" when rank 0 offers none
	Bytes int64  `json:"bytes,omitempty"`
	Why   string `json:"why,omitempty"` // why none
}

type arenaAnswer struct {
	Mapped bool   `json:"mapped"`
	Why    string `json:"why,omitempty"`
}

type arenaVerdict struct {
	Use bool   `json:"use"`
	Why string `json:"why,omitempty"`
}

// arenaExchanged says whether the job agrees on an arena while it forms: for the data paths
// that may take shared memory, when the peer table leaves one host possible, on every rank
// alike (each decides from the same table). A table whose ranks name different hosts,
// network namespaces or host overrides cannot form a one-host job, and skipping the exchange
// spares rank 0 a connection to every rank.
func arenaExchanged(cfg Config, peers []peerInfo) bool {
	return cfg.Size > 1 && (cfg.DataPath == DataPathAuto || cfg.DataPath == DataPathShm || cfg.DataPath == DataPathCMA) &&
		oneHostTable(peers)
}

// oneHostTable says whether every rank of the table may run on one host: all name the same
// host name, host override and network namespace.
func oneHostTable(peers []peerInfo) bool {
	for _, p := range peers {
		q := peers[0]
		if p.Hostname != q.Hostname || p.HostOverride != q.HostOverride || p.Proof.NetNS != q.Proof.NetNS {
			return false
		}
	}
	return true
}

// arenaWanted is this rank's own view: "" when it wants an arena, else why not.
func arenaWanted(cfg Config, local []locality) string {
	switch {
	case cfg.ArenaBytes < 0:
		return fmt.Sprintf("rank %d has none configured (ArenaBytes %d)", cfg.Rank, cfg.ArenaBytes)
	case cfg.DataPath != DataPathAuto && cfg.DataPath != DataPathShm && cfg.DataPath != DataPathCMA:
		return fmt.Sprintf("the data path %q takes no shared memory", cfg.DataPath)
	}
	for r, l := range local {
		if !l.same {
			return fmt.Sprintf("rank %d did not prove rank %d on its host: %s", cfg.Rank, r, l.why)
		}
	}
	return ""
}

// arenaOptions are the shm options of this rank's arena; gone is the endpoint's own verdict
// on its peers, read when a wait times out.
func arenaOptions(cfg Config, gone func() error) shm.ArenaOptions {
	return shm.ArenaOptions{Dir: shm.DefaultDir, Ranks: cfg.Size, Rank: cfg.Rank, Spin: cfg.Size <= runtime.NumCPU(),
		Poll: cfg.Stream.Poll, Gone: gone}
}

// formArena runs the exchange on conns (nil at this rank; a nil slice when the job skips the
// exchange, arenaExchanged) and returns the job's arena, nil when it has none. hb may be nil
// (heartbeats off).
func (j *joiner) formArena(ctx context.Context, conns []io.ReadWriteCloser, local []locality, hb *heartbeats, hk *hooks) (*shm.Arena, error) {
	cfg := j.cfg
	why := arenaWanted(cfg, local)
	var gone func() error
	if hb != nil {
		gone = hb.gone
	}
	opts := arenaOptions(cfg, gone)
	if conns == nil {
		if cfg.Size > 1 || why != "" {
			return nil, nil
		}
		a, err := shm.CreateArena(int(arenaBytes(cfg)), opts)
		if err != nil {
			cfg.Logger.Debug("hetsync arena: none", "rank", cfg.Rank, "err", err)
			return nil, nil
		}
		a.Unlink()
		return a, nil
	}
	for r, c := range conns {
		// The exchange runs between rank 0 and each rank; other links (a peer that formed
		// first and already sends) are the endpoint's.
		if r != cfg.Rank && c != nil && (cfg.Rank == 0 || r == 0) {
			stop := setConnDeadline(ctx, c)
			defer stop()
		}
	}
	if cfg.Rank == 0 {
		return j.offerArena(conns, why, opts, hk)
	}
	return j.takeArena(conns[0], why, opts, hk)
}

// arenaBytes is the size of the arena this rank creates: Config.ArenaBytes, or the default
// fitted to the shared-memory directory's free space.
func arenaBytes(cfg Config) int64 {
	if cfg.ArenaBytes != 0 {
		return cfg.ArenaBytes
	}
	free, err := shm.FreeBytes(shm.DefaultDir)
	if err != nil {
		free = -1
	}
	return fitArenaBytes(cfg.Size, free)
}

// setConnDeadline bounds c's reads and writes by ctx until the returned stop.
func setConnDeadline(ctx context.Context, c io.ReadWriteCloser) (stop func()) {
	d, ok := c.(deadliner)
	if !ok {
		return func() {}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = d.SetDeadline(dl)
	}
	interrupted := make(chan struct{})
	after := context.AfterFunc(ctx, func() {
		_ = d.SetDeadline(time.Unix(1, 0))
		close(interrupted)
	})
	return func() {
		if !after() {
			// The handler ran or is running: its past deadline must land before the reset,
			// or it would stay on the connection the job goes on using.
			<-interrupted
		}
		_ = d.SetDeadline(time.Time{})
	}
}

// offerArena is rank 0's side.
func (j *joiner) offerArena(conns []io.ReadWriteCloser, why string, opts shm.ArenaOptions, hk *hooks) (*shm.Arena, error) {
	cfg := j.cfg
	start := time.Now()
	var a *shm.Arena
	var created time.Duration
	offer := arenaOffer{Why: why}
	if why == "" {
		var err error
		if hk != nil && hk.arenaMap != nil {
			err = hk.arenaMap(cfg.Rank)
		}
		size := arenaBytes(cfg)
		if err == nil {
			a, err = shm.CreateArena(int(size), opts)
			created = time.Since(start)
		}
		if err != nil {
			offer.Why = fmt.Sprintf("rank 0 could not create one: %v", err)
		} else {
			offer.Name, offer.Bytes = a.Name(), size
		}
	}
	fail := func(err error) (*shm.Arena, error) {
		if a != nil {
			a.Close()
		}
		return nil, err
	}
	for r := 1; r < cfg.Size; r++ {
		if err := writeMsg(conns[r], offer); err != nil {
			return fail(fmt.Errorf("rank 0: offering the arena to rank %d: %w", r, err))
		}
	}
	verdict := arenaVerdict{Use: a != nil, Why: offer.Why}
	var refused []int
	for r := 1; r < cfg.Size; r++ {
		var ans arenaAnswer
		if err := readMsg(conns[r], &ans); err != nil {
			return fail(fmt.Errorf("rank 0: waiting for rank %d's answer to the arena offer: %w", r, err))
		}
		if a != nil && !ans.Mapped {
			refused = append(refused, r)
			if verdict.Use {
				verdict = arenaVerdict{Why: fmt.Sprintf("rank %d could not map it: %s", r, ans.Why)}
			}
		}
	}
	if a != nil {
		// Every rank that will ever map it has: the name is no longer needed.
		a.Unlink()
	}
	if !verdict.Use && a != nil {
		a.Close()
		a = nil
		cfg.Logger.Debug("hetsync arena: none", "rank", 0, "refused by", sortedRanks(refused), "why", verdict.Why)
	}
	for r := 1; r < cfg.Size; r++ {
		if err := writeMsg(conns[r], verdict); err != nil {
			return fail(fmt.Errorf("rank 0: sending the arena verdict to rank %d: %w", r, err))
		}
	}
	// What forming a job with the arena costs (docs/results/oversubscribed.md): its creation,
	// and the exchange, which also waits for the last rank to finish its data connections.
	cfg.Logger.Debug("hetsync arena: agreed", "rank", 0, "ranks", cfg.Size, "arena", a != nil,
		"created", created, "agreed", time.Since(start))
	return a, nil
}

// takeArena is the side of every other rank.
func (j *joiner) takeArena(c io.ReadWriteCloser, why string, opts shm.ArenaOptions, hk *hooks) (*shm.Arena, error) {
	cfg := j.cfg
	var offer arenaOffer
	if err := readMsg(c, &offer); err != nil {
		return nil, fmt.Errorf("rank %d: waiting for rank 0's arena offer: %w", cfg.Rank, err)
	}
	var a *shm.Arena
	ans := arenaAnswer{Why: why}
	if offer.Name != "" && why == "" {
		var err error
		if hk != nil && hk.arenaMap != nil {
			err = hk.arenaMap(cfg.Rank)
		}
		if err == nil {
			a, err = shm.OpenArena(offer.Name, opts)
		}
		if err == nil && int64(len(a.Bytes())) < offer.Bytes {
			err = fmt.Errorf("rank %d: the arena %s has %d bytes, rank 0 offered %d", cfg.Rank, offer.Name, len(a.Bytes()), offer.Bytes)
			a.Close()
			a = nil
		}
		ans = arenaAnswer{Mapped: err == nil}
		if err != nil {
			ans.Why = err.Error()
		}
	}
	var verdict arenaVerdict
	err := writeMsg(c, ans)
	if err == nil {
		err = readMsg(c, &verdict)
	}
	if err != nil {
		if a != nil {
			a.Close()
		}
		return nil, fmt.Errorf("rank %d: agreeing on the arena with rank 0: %w", cfg.Rank, err)
	}
	if !verdict.Use {
		if a != nil {
			a.Close()
		}
		cfg.Logger.Debug("hetsync arena: none", "rank", cfg.Rank, "why", verdict.Why)
		return nil, nil
	}
	if a == nil {
		// Rank 0 cannot say use after this rank did not map it: a broken peer.
		return nil, fmt.Errorf("rank %d: rank 0 says use the arena, which this rank did not map", cfg.Rank)
	}
	return a, nil
}

// gone is the heartbeats' verdict on the job's ranks for an arena wait: the error a failed
// peer was failed with, nil while all live. Safe on a nil receiver (heartbeats off).
func (hb *heartbeats) gone() error {
	if hb == nil {
		return nil
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	for _, p := range hb.peers {
		if p.Failed != nil {
			return p.Failed
		}
	}
	return nil
}

// Arena is the job's arena (transport.ArenaHolder), nil when it has none: every rank of the
// job has one or none has.
func (e *endpoint) Arena() transport.Arena {
	if e.arena == nil {
		return nil
	}
	return e.arena
}

var (
	_ transport.Arena       = (*shm.Arena)(nil)
	_ transport.ArenaHolder = (*endpoint)(nil)
)
