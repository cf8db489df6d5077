package collective

import "context"

// arenaCall runs call seq of kind through the arena.
func (c *Comm) arenaCall(ctx context.Context, seq uint64, kind collKind, buf Buffer, op ReduceOp, root int) error {
	err := c.arenaRun(ctx, seq, kind, buf, op, root)
	if err == nil {
		c.sentBy.CountClass(LinkHost, arenaShare(kind, buf, root, c.Rank(), c.Size()))
	}
	return err
}

// arenaRun is arenaCall's work.
func (c *Comm) arenaRun(ctx context.Context, seq uint64, kind collKind, buf Buffer, op ReduceOp, root int) error {
	sig := c.signature(kind, buf.DType, op, buf.Len(), root)
	nb, es, p, me := len(buf.Bytes), buf.DType.Size(), c.Size(), c.Rank()
	block := func(r int) (lo, hi int) {
		a, b := Partition(buf.Len(), p, r)
		return a * es, b * es
	}
	switch kind {
	case kindReduceScatter:
		lo, hi := block(me)
		return c.arenaAllReduce(ctx, seq, sig, buf, op, lo, hi)
	case kindAllGather:
		return c.arenaGather(ctx, seq, sig, buf, block)
	case kindBroadcast:
		return c.arenaGather(ctx, seq, sig, buf, func(r int) (int, int) {
			if r == root {
				return 0, nb
			}
			return 0, 0
		})
	}
	return c.arenaAllReduce(ctx, seq, sig, buf, op, 0, nb)
}

// arenaGather moves blocks without reducing them: an all-gather (every rank contributes its
// block Partition(n, p, rank) and receives all of them) or a broadcast (root contributes the
// whole buffer, the others receive it). from(r) is the byte range of buf that rank r
// contributes, empty for a rank that contributes nothing.
//
// A call of at most arenaSmallBytes (and one chunk) is one phase: every rank copies its range
// into its slot of set A and arrives at the barrier; the last to arrive assembles result A from
// the slots and releases the others; everyone copies result A out. As in arenaAllReduce,
// result A is written only in the last arriver's turn, when every rank has finished reading the
// previous call's results.
//
// A larger call is cut into K chunks of at most ac.chunk bytes of each rank's range and runs
// K+1 steps, each ending at a barrier: in step j a rank copies chunk j of its range into its
// slot of set j%2 and copies chunk j-1 of every other rank's range out of the slots of set
// (j-1)%2. A slot set written in step j is read in step j+1 and written next in step j+2, after
// barrier j+1, which every reader reached after its reads. The barrier after the last step
// keeps the next call, which writes set A in its first step, from writing over slots a slower
// rank still reads: here the reads of a step come from slots, where an allreduce's last reads
// come from the result areas.
func (c *Comm) arenaGather(ctx context.Context, seq uint64, sig uint32, buf Buffer, from func(r int) (lo, hi int)) error {
	ac := c.arena
	if err := ac.publish(seq, sig); err != nil {
		return err
	}
	nb := len(buf.Bytes)
	lo, hi := from(ac.rank)
	if nb <= min(arenaSmallBytes, ac.chunk) {
		copy(ac.slot(0, ac.rank, hi-lo), buf.Bytes[lo:hi])
		assemble := func() {
			for r := range ac.p {
				a, b := from(r)
				copy(ac.result(0, a, b), ac.slot(0, r, b-a))
			}
		}
		if err := c.arenaBarrier(ctx, seq, true, assemble); err != nil {
			return err
		}
		for r := range ac.p {
			if a, b := from(r); r != ac.rank && a < b {
				copy(buf.Bytes[a:b], ac.result(0, a, b))
			}
		}
		return nil
	}
	ce := ac.chunk / buf.DType.Size() * buf.DType.Size()
	k := 0
	for r := range ac.p {
		a, b := from(r)
		k = max(k, (b-a+ce-1)/ce)
	}
	// span is chunk j of rank r's range, as bytes of buf.
	span := func(r, j int) (lo, hi int) {
		a, b := from(r)
		return min(a+j*ce, b), min(a+(j+1)*ce, b)
	}
	for j := 0; j <= k; j++ {
		if j < k {
			a, b := span(ac.rank, j)
			copy(ac.slot(j%2, ac.rank, b-a), buf.Bytes[a:b])
		}
		if j >= 1 {
			for r := range ac.p {
				if a, b := span(r, j-1); r != ac.rank && a < b {
					copy(buf.Bytes[a:b], ac.slot((j-1)%2, r, b-a))
				}
			}
		}
		if err := c.arenaBarrier(ctx, seq, j == 0, nil); err != nil {
			return err
		}
	}
	return nil
}
