package collective

import (
	"errors"
	"fmt"

	"github.com/hetsync/hetsync/transport"
)

// callDesc is a collective call as its op signature hashes it: what every rank must agree on.
type callDesc struct {
	kind    collKind
	dt      DType
	op      ReduceOp
	n, root int
}

// String is the call as a program wrote it: "AllReduce(float, 1024, sum)",
// "Broadcast(float, 1024, root 0)".
func (d callDesc) String() string {
	switch d.kind {
	case kindAllReduce:
		if d.root < 0 {
			return "the re-planning vote after its call"
		}
		return fmt.Sprintf("AllReduce(%v, %d, %v)", d.dt, d.n, d.op)
	case kindReduceScatter:
		return fmt.Sprintf("ReduceScatter(%v, %d, %v)", d.dt, d.n, d.op)
	case kindAllGather:
		return fmt.Sprintf("AllGather(%v, %d)", d.dt, d.n)
	case kindBroadcast:
		return fmt.Sprintf("Broadcast(%v, %d, root %d)", d.dt, d.n, d.root)
	case kindReduce:
		return fmt.Sprintf("Reduce(%v, %d, %v, root %d)", d.dt, d.n, d.op, d.root)
	case kindBarrier:
		return "Barrier()"
	case kindAllToAll:
		return fmt.Sprintf("AllToAll(%v, %d)", d.dt, d.n)
	case kindAttribution:
		return "the attribution of its call's waits"
	}
	return d.kind.String()
}

// Bounds of the search for the call behind a signature (decodeSignature): the roots tried
// beside the ones the call at hand names, and the counts tried for a call that differs from it
// in its count alone.
const (
	decodeRoots    = 64
	decodeMaxCount = 1 << 20
)

// decodeSignature finds the call whose signature on this Comm is sig, near being the call this
// rank is in: the signature is a hash, so the calls are tried. Every collective, dtype and
// reduction is tried with near's count (or none), the roots up to decodeRoots and near's,
// under this Comm's algorithm; then near's collective, dtype, reduction and root with every
// count up to decodeMaxCount. A call of another algorithm, communicator or count beyond that is
// not found.
func (c *Comm) decodeSignature(sig uint32, near callDesc) (callDesc, bool) {
	a, ok := c.alg.(*auto)
	shm := ok && a.sharedMemory()
	roots := []int{-1, near.root}
	for r := range min(c.Size(), decodeRoots) {
		roots = append(roots, r)
	}
	for kind := kindAllReduce; kind <= kindAttribution; kind++ {
		pre := sigPrefix(kind, c.sigAlg, shm)
		for dt := Float32; dt <= Int64; dt++ {
			for op := ReduceOp(0); op <= Prod; op++ {
				for _, n := range []int{near.n, 0, 2} {
					for _, root := range roots {
						if pre.args(dt, op, n, root) == sig {
							return callDesc{kind, dt, op, n, root}, true
						}
					}
				}
			}
		}
	}
	pre := sigPrefix(near.kind, c.sigAlg, shm)
	for n := range decodeMaxCount {
		if pre.args(near.dt, near.op, n, near.root) == sig {
			return callDesc{near.kind, near.dt, near.op, n, near.root}, true
		}
	}
	return callDesc{}, false
}

// mismatchSentence says in the program's words which calls a *transport.MismatchError in err
// found on this rank and the peer, mine being the call this rank is in: "rank 1 called
// AllReduce(float, 1024, sum) where rank 0 called Broadcast(float, 1024, root 0)". It is
// empty when err holds no mismatch.
func (c *Comm) mismatchSentence(err error, mine callDesc) string {
	var mm *transport.MismatchError
	if !errors.As(err, &mm) || mm.Rank != c.Rank() || mm.Peer < 0 || mm.Peer >= c.Size() {
		return ""
	}
	name := func(h transport.Header, near callDesc) string {
		d, ok := c.decodeSignature(h.Op, near)
		if !ok {
			return fmt.Sprintf("a call this rank cannot name (another algorithm, communicator or count; op signature %#08x)", h.Op)
		}
		return d.String()
	}
	want := name(mm.Want, mine)
	got := name(mm.Got, mine)
	if mm.Got.Seq != mm.Want.Seq {
		return fmt.Sprintf("%s sent a message of its call #%d, %s, where %s is in call #%d, %s",
			c.peerName(mm.Peer), mm.Got.Seq, got, c.peerName(c.Rank()), mm.Want.Seq, want)
	}
	return fmt.Sprintf("%s called %s where %s called %s", c.peerName(mm.Peer), got, c.peerName(c.Rank()), want)
}
