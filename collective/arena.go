package collective

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hetsync/hetsync/transport"
)

// The arena path runs an allreduce through the memory every rank of a one-host job maps
// (transport.Arena) instead of messages: each rank writes its contribution once, reduces its
// share straight from the others' and copies the result out, and sleeps once per phase. When
// the ranks outnumber the cores a phase costs one wake-up per rank, where a ring costs one
// per message. docs/algorithms.md ("Arena allreduce") is its spec.
//
// Layout of the arena (offsets in bytes; every word sits alone on its 64-byte line so that a
// rank polling one does not steal the line another rank writes):
//
//	line 0          count: ranks arrived at the current barrier
//	line 1          gen: barrier generation (bits 0-30); bit 31 set when the job gave up
//	line 2          the give-up record: rank+1, reason (arenaFailed or arenaMismatch), seq
//	line 3+r        rank r's header: one 64-bit word naming its current call (arenaCall);
//	                word 2 counts the Comms this rank built over the arena
//	line 3+p+r      rank r's stamps of an attributed call (arena_attrib.go)
//	dataOff         slots: two sets (A and B) of p slots of chunk bytes each
//	                results: two areas (A and B) of chunk bytes
//
// Only a Comm over the job's own endpoint uses the arena (never a sub-communicator, whose
// ranks are a part of the job), and the Comm's calls run one at a time (turns), so one call
// of one Comm owns the arena at a time. Several Comms over one endpoint (a program's and a
// library's) share the arena as they share the endpoint's collective channel: their calls
// follow each other in the program's order, the same on every rank, never at the same time;
// each rank's header names the Comm as well as the call, so a Comm's first calls are not
// compared with what another Comm's last call left there.
const (
	arenaLine      = 64
	arenaCountOff  = 0
	arenaGenOff    = arenaLine
	arenaAbortOff  = 2 * arenaLine
	arenaRanksOff  = 3 * arenaLine
	arenaAbortBit  = 1 << 31
	arenaFailed    = 1         // a rank failed on its side (its reason goes over the endpoint)
	arenaMismatch  = 2         // the ranks' headers disagree
	arenaClaimed   = 1<<32 - 1 // the give-up record is being written
	arenaClaimWait = 10000     // yields to wait for a claimed record
	arenaMinChunk  = arenaLine
	arenaPageBytes = 4096
)

// arenaSmallBytes is the largest allreduce that runs in one phase: the last rank to arrive
// reduces all p slots alone while the others sleep, which beats a second phase (another
// wake-up of every rank) while p × n stays small.
const arenaSmallBytes = 16 << 10

// arenaMinRanks is the rank count from which every allreduce and barrier runs through the
// arena. A waiting rank polls the arena's word, yielding its core, for as long as the job lets
// receivers poll their pipes (transport/shm ArenaOptions.Poll), and a barrier is then cheaper
// than the schedules' messages: 3 and 4 ranks on 2 cores took 0.35–0.6× the schedules' time
// from 4 KiB to 1 MiB, polling or not, and were level at 4 and 16 MiB. Two ranks exchange one
// message each way, as fast as a barrier: they take the arena from arenaFewRanksBytes, where
// its 1 MiB chunks were ahead (docs/results/oversubscribed.md has the measurements).
const (
	arenaMinRanks      = 3
	arenaFewRanksBytes = 2 << 20
)

// arenaBroadcastBytes is the smallest broadcast that runs through the arena. A broadcast's
// tree lets the root return once its sends are queued, where the arena's ranks meet at a
// barrier per chunk: at 4 KiB the tree took 0.3× the arena's time on 4 ranks and 0.25× on 8;
// at 256 KiB they were level on 4 ranks, and from 1 MiB the arena took 0.02–0.36× the tree's.
const arenaBroadcastBytes = 256 << 10

// arenaColl is a Comm's view of its job's arena: the layout fitted to p ranks and the words
// it synchronizes on. It keeps no state between calls beyond what lives in the arena.
type arenaColl struct {
	a       transport.Arena
	mem     []byte
	p, rank int
	chunk   int // bytes of one slot
	// minRanks, fewRanksBytes and broadcastBytes are arenaMinRanks, arenaFewRanksBytes and
	// arenaBroadcastBytes (tests lower them to run every call through the arena).
	minRanks, fewRanksBytes, broadcastBytes int
	dataOff                                 int
	count                                   *atomic.Uint32
	gen                                     *atomic.Uint32
	abort                                   [3]*atomic.Uint32 // who+1, reason, seq
	hdr                                     *atomic.Uint64    // this rank's header
	comm                                    uint32            // this Comm's number among the arena's Comms on this rank
	// timed says that the running call is attributed: its barriers add the time they slept
	// to blocked.
	timed   bool
	blocked time.Duration
}

// newArenaColl fits the layout to a job of p ranks, or returns nil when the job has no arena,
// has one rank, or the arena is too small for a slot of arenaMinChunk per rank.
func newArenaColl(a transport.Arena, p, rank int) *arenaColl {
	if a == nil || p < 2 {
		return nil
	}
	mem := a.Bytes()
	dataOff, chunk := arenaLayout(len(mem), p)
	if chunk < arenaMinChunk {
		return nil
	}
	w := func(off int) *atomic.Uint32 { return transport.ArenaWord(mem, off) }
	me := arenaRanksOff + rank*arenaLine
	return &arenaColl{
		a: a, mem: mem, p: p, rank: rank, chunk: chunk, dataOff: dataOff,
		minRanks: arenaMinRanks, fewRanksBytes: arenaFewRanksBytes, broadcastBytes: arenaBroadcastBytes,
		count: w(arenaCountOff), gen: w(arenaGenOff),
		abort: [3]*atomic.Uint32{w(arenaAbortOff), w(arenaAbortOff + 4), w(arenaAbortOff + 8)},
		hdr:   arenaWord64(mem, me),
		// The ranks build their Comms in the same order (each Comm needs every rank), so the
		// count names the same Comm on every rank. It skips 0, which names no Comm.
		comm: w(me+8).Add(1)%255 + 1,
	}
}

// arenaLayout is where the slots of p ranks start in an arena of size bytes, after the header
// (the barrier's lines and two lines per rank, to a page), and the bytes of one slot: what
// transport.ArenaSlots slots of at most transport.ArenaSlotBytes leave room for, in whole
// lines (transport.ArenaBytesFor sizes the default arena for this layout).
func arenaLayout(size, p int) (dataOff, chunk int) {
	dataOff = (arenaRanksOff + 2*p*arenaLine + arenaPageBytes - 1) / arenaPageBytes * arenaPageBytes
	if size > dataOff {
		chunk = min((size-dataOff)/transport.ArenaSlots(p)/arenaLine*arenaLine, transport.ArenaSlotBytes(p))
	}
	return dataOff, chunk
}

// arenaWord64 is the 64-bit word at byte offset off of mem, a multiple of 64 in an arena
// aligned to 64 bytes.
func arenaWord64(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off : off+8][0]))
}

// slot is rank r's slot of set s (0 or 1), n bytes from its start.
func (ac *arenaColl) slot(s, r, n int) []byte {
	off := ac.dataOff + (s*ac.p+r)*ac.chunk
	return ac.mem[off : off+n : off+n]
}

// result is result area s (0 or 1), bytes [lo, hi) of it.
func (ac *arenaColl) result(s, lo, hi int) []byte {
	off := ac.dataOff + 2*ac.p*ac.chunk + s*ac.chunk
	return ac.mem[off+lo : off+hi : off+hi]
}

// arenaCall names a call in a rank's header: the Comm's number (8 bits) and the call's
// sequence number (24 bits) in the high word, its op signature in the low one. One word, so
// that a rank reading another's header never sees a call's number with another call's
// signature. A rank that has published nothing holds 0, which names no call. Ranks of one Comm
// are never 2^24 calls apart, so the cut sequence number still tells calls apart.
func (ac *arenaColl) arenaCall(seq uint64, sig uint32) uint64 {
	return uint64(ac.comm)<<56 | (seq&(1<<24-1))<<32 | uint64(sig)
}

// header is rank r's published call.
func (ac *arenaColl) header(r int) uint64 {
	return arenaWord64(ac.mem, arenaRanksOff+r*arenaLine).Load()
}

// publish announces that this rank is in call seq with signature sig, and checks the calls
// the other ranks announced: a rank in the same call with another signature is a mismatch.
// Every call of a Comm that has an arena publishes, the schedule path's too, so that a rank
// in an arena call and one in a schedule call at the same seq find each other: each stores
// its own header before it loads the others', so at least one of the two sees the other's.
func (ac *arenaColl) publish(seq uint64, sig uint32) error {
	call := ac.arenaCall(seq, sig)
	ac.hdr.Store(call)
	if r := ac.disagreeing(call, false); r >= 0 {
		ac.giveUp(arenaMismatch, seq)
		return ac.mismatchErr(r)
	}
	return nil
}

// disagreeing is the first rank whose header differs from call: with all, in any way;
// without, only a rank in the same call (Comm and seq) with another signature. -1 when there
// is none.
func (ac *arenaColl) disagreeing(call uint64, all bool) int {
	for r := 0; r < ac.p; r++ {
		h := ac.header(r)
		if (h>>32 == call>>32 && h != call) || (all && h != call) {
			return r
		}
	}
	return -1
}

// mismatchErr is this rank's error for a disagreement with rank r, in the form the schedule
// path reports one (a frame from r that is not the expected one).
func (ac *arenaColl) mismatchErr(r int) error {
	header := func(h uint64) transport.Header {
		return transport.Header{Channel: chanCollective, Seq: h >> 32 & (1<<24 - 1), Op: uint32(h)}
	}
	want, got := header(ac.header(ac.rank)), header(ac.header(r))
	return &transport.MismatchError{Rank: ac.rank, Peer: r, Want: want, Got: got}
}

// giveUp records that the job's arena calls cannot go on and wakes every waiter. The first
// record stays; the arena is unusable afterwards, as is the communicator.
func (ac *arenaColl) giveUp(reason uint32, seq uint64) {
	if ac.abort[0].CompareAndSwap(0, arenaClaimed) {
		ac.abort[1].Store(reason)
		ac.abort[2].Store(uint32(seq))
		ac.abort[0].Store(uint32(ac.rank) + 1)
	}
	// The bit goes up once the record is whole, whoever wrote it: a rank woken by the bit
	// reads the record at once. A writer that died between its stores would leave it claimed
	// for ever: after a bounded wait the bit goes up anyway, and readers name nobody.
	for i := 0; i < arenaClaimWait && ac.abort[0].Load() == arenaClaimed; i++ {
		runtime.Gosched()
	}
	for {
		g := ac.gen.Load()
		if g&arenaAbortBit != 0 || ac.gen.CompareAndSwap(g, g|arenaAbortBit) {
			break
		}
	}
	ac.a.Wake(arenaGenOff)
}

// arenaGivenUp is the error of a call that found the arena given up: the mismatch as this rank
// sees it, or the failure of the rank that gave up (its reason read from the endpoint).
func (c *Comm) arenaGivenUp(seq uint64) error {
	ac := c.arena
	who := int(ac.abort[0].Load()) - 1
	if who < 0 || who >= ac.p {
		return fmt.Errorf("a rank gave up on the job's arena calls before call #%d and left no record of itself", seq)
	}
	if ac.abort[1].Load() == arenaMismatch {
		// A rank in this rank's call with another signature is the mismatch; a rank whose
		// header differs otherwise may only not have published the call yet (still waking
		// from the last barrier), so it is named only when no rank of the first kind is.
		mine := ac.header(ac.rank)
		r := ac.disagreeing(mine, false)
		if r < 0 {
			r = ac.disagreeing(mine, true)
		}
		if r >= 0 {
			return ac.mismatchErr(r)
		}
		return fmt.Errorf("rank %d found the ranks in different collectives at call #%d", who, ac.abort[2].Load())
	}
	if who == ac.rank {
		return fmt.Errorf("this rank gave up on call #%d earlier", ac.abort[2].Load())
	}
	return c.peerAborted(who, uint64(ac.abort[2].Load()))
}

// arenaBarrier returns once every rank has called it: the last to arrive runs last (when not nil)
// and then starts the next generation and wakes the others, which sleep in Wait. With check,
// the last arriver first compares every rank's header and gives up on a disagreement.
func (c *Comm) arenaBarrier(ctx context.Context, seq uint64, check bool, last func()) error {
	ac := c.arena
	g := ac.gen.Load()
	if g&arenaAbortBit != 0 {
		return c.arenaGivenUp(seq)
	}
	if ac.count.Add(1) == uint32(ac.p) {
		ac.count.Store(0)
		if check {
			if r := ac.disagreeing(ac.header(ac.rank), true); r >= 0 {
				ac.giveUp(arenaMismatch, seq)
				return ac.mismatchErr(r)
			}
		}
		if last != nil {
			last()
		}
		if !ac.gen.CompareAndSwap(g, (g+1)&^arenaAbortBit) {
			return c.arenaGivenUp(seq)
		}
		ac.a.Wake(arenaGenOff)
		return nil
	}
	var slept time.Time
	if ac.timed {
		slept = time.Now()
	}
	err := ac.a.Wait(ctx, arenaGenOff, g)
	if ac.timed {
		ac.blocked += time.Since(slept)
	}
	// A raised generation means the barrier completed, whatever happened after: a wait fails
	// once any rank is gone, and the last rank to arrive at a call's last barrier returns from
	// the call, and may close its endpoint, as soon as it has released the others; and the
	// ranks released first may already be in their next call and have given up on it (a
	// mismatch) before this rank looks. That give-up belongs to the next call, which finds it
	// when it starts. Only a give-up at this barrier's own generation ends it.
	switch now := ac.gen.Load(); {
	case now&^arenaAbortBit != g:
		return nil
	case now&arenaAbortBit != 0:
		return c.arenaGivenUp(seq)
	}
	return err
}
