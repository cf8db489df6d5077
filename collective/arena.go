package collective

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

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
//	line 3+r        rank r's header: its current call (arenaSeq) and that call's op signature
//	dataOff         slots: two sets (A and B) of p slots of chunk bytes each
//	                results: two areas (A and B) of chunk bytes
//
// Only a Comm over the job's own endpoint uses the arena (never a sub-communicator, whose
// ranks are a part of the job), and the Comm's calls run one at a time (turns), so one call
// of one Comm owns the arena at a time. Two Comms built over the same endpoint would share it
// and must not both run collectives; they would share the endpoint's collective channel too.
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
	arenaMinChunk  = arenaLine
	arenaPageBytes = 4096
)

// arenaChunkMax bounds the chunk: the p slots of a chunk are read by every rank while it
// reduces its share, and p × chunk should stay in the last-level cache. Measured in
// docs/results/oversubscribed.md ("Arena allreduce").
const arenaChunkMax = 256 << 10

// arenaSmallBytes is the largest allreduce that runs in one phase: the last rank to arrive
// reduces all p slots alone while the others sleep, which beats a second phase (another
// wake-up of every rank) while p × n stays small.
const arenaSmallBytes = 16 << 10

// arenaColl is a Comm's view of its job's arena: the layout fitted to p ranks and the words
// it synchronizes on. It keeps no state between calls beyond what lives in the arena.
type arenaColl struct {
	a       transport.Arena
	mem     []byte
	p, rank int
	chunk   int // bytes of one slot
	dataOff int
	count   *atomic.Uint32
	gen     *atomic.Uint32
	abort   [3]*atomic.Uint32 // who+1, reason, seq
	seq     *atomic.Uint32    // this rank's header words
	sig     *atomic.Uint32
}

// newArenaColl fits the layout to a job of p ranks, or returns nil when the job has no arena,
// has one rank, or the arena is too small for a slot of arenaMinChunk per rank.
func newArenaColl(a transport.Arena, p, rank int) *arenaColl {
	if a == nil || p < 2 {
		return nil
	}
	mem := a.Bytes()
	dataOff := (arenaRanksOff + p*arenaLine + arenaPageBytes - 1) / arenaPageBytes * arenaPageBytes
	chunk := 0
	if len(mem) > dataOff {
		chunk = min((len(mem)-dataOff)/(2*p+2)/arenaLine*arenaLine, arenaChunkMax)
	}
	if chunk < arenaMinChunk {
		return nil
	}
	w := func(off int) *atomic.Uint32 { return transport.ArenaWord(mem, off) }
	me := arenaRanksOff + rank*arenaLine
	return &arenaColl{
		a: a, mem: mem, p: p, rank: rank, chunk: chunk, dataOff: dataOff,
		count: w(arenaCountOff), gen: w(arenaGenOff),
		abort: [3]*atomic.Uint32{w(arenaAbortOff), w(arenaAbortOff + 4), w(arenaAbortOff + 8)},
		seq:   w(me), sig: w(me + 4),
	}
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

// header is rank r's published (seq, signature).
func (ac *arenaColl) header(r int) (seq, sig uint32) {
	off := arenaRanksOff + r*arenaLine
	return transport.ArenaWord(ac.mem, off).Load(), transport.ArenaWord(ac.mem, off+4).Load()
}

// publish announces that this rank is in call seq with signature sig, and checks the calls
// the other ranks announced: a rank in the same call with another signature is a mismatch.
// Every call of a Comm that has an arena publishes, the schedule path's too, so that a rank
// in an arena call and one in a schedule call at the same seq find each other: each stores
// its own header before it loads the others', so at least one of the two sees the other's.
func (ac *arenaColl) publish(seq uint64, sig uint32) error {
	ac.sig.Store(sig)
	ac.seq.Store(arenaSeq(seq))
	if r := ac.disagreeing(arenaSeq(seq), sig, false); r >= 0 {
		ac.giveUp(arenaMismatch, seq)
		return ac.mismatchErr(r)
	}
	return nil
}

// arenaSeq is call seq as a header holds it: its low 32 bits plus one, so that a rank that has
// published nothing yet (a zero word) is in no call.
func arenaSeq(seq uint64) uint32 { return uint32(seq) + 1 }

// disagreeing is the first rank whose header differs from (seq, sig): with anySeq, in either
// word; without, only a rank in call seq with another signature. -1 when there is none.
func (ac *arenaColl) disagreeing(seq, sig uint32, anySeq bool) int {
	for r := 0; r < ac.p; r++ {
		s, g := ac.header(r)
		if (s == seq && g != sig) || (anySeq && s != seq) {
			return r
		}
	}
	return -1
}

// mismatchErr is this rank's error for a disagreement with rank r, in the form the schedule
// path reports one (a frame from r that is not the expected one).
func (ac *arenaColl) mismatchErr(r int) error {
	mySeq, mySig := ac.header(ac.rank)
	seq, sig := ac.header(r)
	want := transport.Header{Channel: transport.ChanCollective, Seq: uint64(mySeq - 1), Op: mySig}
	got := transport.Header{Channel: transport.ChanCollective, Seq: uint64(seq - 1), Op: sig}
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
	// The bit goes up only once the record is whole, whoever wrote it: a rank woken by the
	// bit reads the record at once.
	for ac.abort[0].Load() == arenaClaimed {
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
	if ac.abort[1].Load() == arenaMismatch {
		mySeq, mySig := ac.header(ac.rank)
		if r := ac.disagreeing(mySeq, mySig, true); r >= 0 {
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
			mySeq, mySig := ac.header(ac.rank)
			if r := ac.disagreeing(mySeq, mySig, true); r >= 0 {
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
	if err := ac.a.Wait(ctx, arenaGenOff, g); err != nil {
		return err
	}
	if ac.gen.Load()&arenaAbortBit != 0 {
		return c.arenaGivenUp(seq)
	}
	return nil
}
