package collective

import "context"

// arenaTakes says whether a call of nbytes runs over the arena: an allreduce, reduce-scatter,
// all-gather, broadcast or barrier (an allreduce of nothing with its own signature), under
// auto, on a Comm whose job has one, with no lossy codec (the arena moves the values as they
// are, where the rings would cast them), and at a rank count and size where it was measured
// ahead of the schedules (arenaMinRanks, arenaFewRanksBytes, arenaBroadcastBytes). Every input
// is the same on every rank, the arena's presence included (the transport agrees on it), so
// every rank decides alike. A reduce keeps its tree, which lets the ranks below the root return
// before the root has the result; that was not measured against the arena.
func (c *Comm) arenaTakes(kind collKind, nbytes int) bool {
	ac := c.arena
	if ac == nil || c.opts.Codec.Lossy() {
		return false
	}
	switch kind {
	case kindAllReduce, kindBarrier, kindReduceScatter, kindAllGather:
	case kindBroadcast:
		if nbytes < ac.broadcastBytes {
			return false
		}
	default:
		return false
	}
	return ac.p >= ac.minRanks || nbytes >= ac.fewRanksBytes
}

// arenaPublish is arenaColl.publish for calls of a Comm that may use the arena.
func (c *Comm) arenaPublish(seq uint64, sig uint32) error {
	if c.arena == nil {
		return nil
	}
	return c.arena.publish(seq, sig)
}

// arenaAbort wakes every rank waiting in the arena after this rank gave up on call seq.
func (c *Comm) arenaAbort(seq uint64) {
	if c.arena != nil {
		c.arena.giveUp(arenaFailed, seq)
	}
}

// arenaAllReduce reduces buf over all ranks through the arena; the result is reduced in rank
// order (((x0 op x1) op x2) ...), the same bits on every rank. Only bytes [keepLo, keepHi) of
// the result are copied back into buf: all of it for an allreduce, the rank's block for a
// reduce-scatter, whose other blocks keep their input.
//
// A call of at most arenaSmallBytes (and one chunk) is one phase: every rank copies its buffer
// into its slot of set A and arrives at the barrier; the last to arrive reduces all slots into
// result A and releases the others; everyone copies result A out.
//
// A larger call is cut into K chunks of at most ac.chunk bytes and runs K+2 steps with a
// barrier after each of the first K+1. In step j a rank copies chunk j into its slot of set
// j%2, reduces its share (Partition of the chunk's elements) of chunk j-1 from the p slots of
// set (j-1)%2 into result (j-1)%2, and copies chunk j-2 out of result (j-2)%2. Nobody
// overwrites what another still reads: slot set s is written in step j and read in step j+1
// only, and written next in step j+2, after barrier j+1, which every reader passed after its
// step j+1; result s is written in step j+1 and read in step j+2, and written next in step
// j+3, after barrier j+2. Between calls the same holds: a call's first writes to set A and
// result A come in its step 0 and 1, before which every rank has left the previous call's
// last barrier and, for result A, arrived at this call's first one, so it finished reading.
// The one-phase form writes result A only in the last arriver's turn, when every rank has
// arrived, so has finished reading the previous call's results.
func (c *Comm) arenaAllReduce(ctx context.Context, seq uint64, sig uint32, buf Buffer, op ReduceOp, keepLo, keepHi int) error {
	ac := c.arena
	if err := ac.publish(seq, sig); err != nil {
		return err
	}
	nb, es := len(buf.Bytes), buf.DType.Size()
	// keep copies result area s, which holds bytes [lo, hi) of the call's result, into buf
	// where they overlap [keepLo, keepHi).
	keep := func(s, lo, hi int) {
		if a, b := max(lo, keepLo), min(hi, keepHi); a < b {
			copy(buf.Bytes[a:b], ac.result(s, a-lo, b-lo))
		}
	}
	if nb <= min(arenaSmallBytes, ac.chunk) {
		copy(ac.slot(0, ac.rank, nb), buf.Bytes)
		if err := c.arenaBarrier(ctx, seq, true, func() { ac.reduceRange(0, buf.DType, op, 0, nb) }); err != nil {
			return err
		}
		keep(0, 0, nb)
		return nil
	}
	ce := ac.chunk / es * es
	k := (nb + ce - 1) / ce
	span := func(j int) (lo, hi int) { return j * ce, min((j+1)*ce, nb) }
	for j := 0; j <= k+1; j++ {
		if j < k {
			lo, hi := span(j)
			copy(ac.slot(j%2, ac.rank, hi-lo), buf.Bytes[lo:hi])
		}
		if j >= 1 && j <= k {
			lo, hi := span(j - 1)
			a, b := Partition((hi-lo)/es, ac.p, ac.rank)
			ac.reduceRange((j-1)%2, buf.DType, op, a*es, b*es)
		}
		if j >= 2 {
			lo, hi := span(j - 2)
			keep(j%2, lo, hi)
		}
		if j <= k {
			if err := c.arenaBarrier(ctx, seq, j == 0, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceRange sets bytes [lo, hi) of result s to the reduction, in rank order, of the same
// bytes of the p slots of set s.
func (ac *arenaColl) reduceRange(s int, dt DType, op ReduceOp, lo, hi int) {
	if lo == hi {
		return
	}
	dst := ac.result(s, lo, hi)
	copy(dst, ac.slot(s, 0, hi)[lo:])
	for r := 1; r < ac.p; r++ {
		reduceBytes(dt, op, dst, ac.slot(s, r, hi)[lo:])
	}
}
