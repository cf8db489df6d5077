package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Arena is memory that every rank of a job maps when all of them run on one host, with a way to
// sleep until another rank changes a word of it. With it a collective can read the other
// ranks' contributions where they wrote them instead of passing them along as messages, and a
// rank that waits sleeps once per phase of a collective instead of once per message: what
// decides the time when the ranks outnumber the cores.
//
// Bytes are the same memory in every rank. The arena's layout belongs to its one user (the
// collective layer); the transport only creates, maps, zeroes and removes it.
type Arena interface {
	// Bytes is the shared memory, 64-byte aligned, all zero when the job formed.
	Bytes() []byte
	// Wait returns nil once the 32-bit word at byte offset off (a multiple of 4) no longer holds
	// old. It returns an error when ctx ends, when the arena is closed, or when a rank of the
	// job is gone (the error names it); it never returns nil while the word still holds old.
	// Any rank that is gone fails the wait, whichever rank's word it waits for, and a rank is
	// gone once it closed its endpoint (or its process exited): a collective must not let a
	// rank return from a call while another may still wait in that call.
	Wait(ctx context.Context, off int, old uint32) error
	// Wake wakes every rank waiting in Wait on the word at off. Call it after changing the word.
	Wake(off int)
}

// ArenaHolder is implemented by endpoints that can offer an Arena. Arena returns nil when the
// job has none. An endpoint offers one on every rank of the job or on none (the ranks agree on
// it while the job forms), so a collective may choose its algorithm from whether it has one.
type ArenaHolder interface {
	Arena() Arena
}

// HostArena is the Arena of ep or of the first endpoint under its decorators that holds one
// (As), or nil. A decorator that changes how messages travel (a straggler's delays, which an
// arena would bypass) holds none itself and so hides the arena beneath it.
func HostArena(ep Endpoint) Arena {
	if h, ok := As[ArenaHolder](ep); ok {
		return h.Arena()
	}
	return nil
}

// ArenaSlotBytes is the slot the collectives of a job of p ranks lay out in an arena large
// enough for it: the chunk of an arena allreduce, each of which costs every rank a wake-up at
// a barrier. 1 MiB up to 16 ranks, 64 KiB per rank above (2 MiB at 32 ranks, 4 MiB at 64):
// fewer, larger chunks mean fewer barriers, and the more ranks share a core, the longer a rank
// preempted in the middle of its share holds up every barrier, so the best slot grows with
// the rank count (docs/results/oversubscribed.md, "Arena slots").
func ArenaSlotBytes(p int) int { return max(1<<20, p*(64<<10)) }

// ArenaSlots is how many slots the collectives lay out in the arena of a job of p ranks: two
// sets of p slots (one filled while the other is reduced) and two result areas.
func ArenaSlots(p int) int { return 2*p + 2 }

// ArenaBytesFor is the size of an arena that holds the collectives' whole layout for p ranks at
// ArenaSlotBytes: ArenaSlots slots, and 1 MiB and 128 bytes a rank for the header (two 64-byte
// lines a rank and a few more). A smaller arena works with smaller slots.
func ArenaBytesFor(p int) int64 {
	return int64(ArenaSlots(p))*int64(ArenaSlotBytes(p)) + 1<<20 + int64(p)*128
}

// ArenaWord is the 32-bit word at byte offset off of b, for atomic use. It panics if off is
// not a multiple of 4 inside b: offsets are the caller's layout, not input.
func ArenaWord(b []byte, off int) *atomic.Uint32 {
	if off < 0 || off%4 != 0 || off+4 > len(b) {
		panic(fmt.Sprintf("transport: arena word at %d of %d bytes", off, len(b)))
	}
	return (*atomic.Uint32)(unsafe.Pointer(&b[off]))
}

// memArena is the arena of an in-process job: one Go slice every endpoint shares. Wait sleeps
// on a channel that Wake closes and replaces, so every waiter re-reads its word after any
// Wake: simple, and the in-process job serves tests, not speed.
type memArena struct {
	job  *memJob
	mem  []byte
	mu   sync.Mutex
	bell chan struct{}
}

func newMemArena(job *memJob, size int) *memArena {
	// Over-allocate so the slice can start on a 64-byte boundary.
	raw := make([]byte, size+64)
	skip := (64 - int(uintptr(unsafe.Pointer(&raw[0]))%64)) % 64
	return &memArena{job: job, mem: raw[skip : skip+size : skip+size], bell: make(chan struct{})}
}

func (a *memArena) Bytes() []byte { return a.mem }

func (a *memArena) Wait(ctx context.Context, off int, old uint32) error {
	w := ArenaWord(a.mem, off)
	for {
		a.mu.Lock()
		bell := a.bell
		a.mu.Unlock()
		if w.Load() != old {
			return nil
		}
		if r := a.job.firstClosed(); r >= 0 {
			return fmt.Errorf("arena: rank %d closed its endpoint (its rank ended)", r)
		}
		select {
		case <-bell:
		case <-ctx.Done():
			return ctx.Err()
		case <-a.job.anyClosed:
		}
	}
}

func (a *memArena) Wake(off int) {
	a.mu.Lock()
	close(a.bell)
	a.bell = make(chan struct{})
	a.mu.Unlock()
}
