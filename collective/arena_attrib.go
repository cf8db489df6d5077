package collective

import (
	"context"
	"time"
)

// An attributed arena call (SetAttribution) ends with two more barriers: between them every
// rank reads every rank's start and blocked time from the arena (the ranks share the host's
// clock, so the stamps need no exchange); after the second nobody reads them any more, so the
// next call may overwrite them. An arena call has no links, so its culprit is the late rank
// or nobody.

// stampOff is the offset of rank r's stamp line: start and blocked time, 8 bytes each.
func (ac *arenaColl) stampOff(r int) int {
	return arenaRanksOff + (ac.p+r)*arenaLine
}

// execArena runs a call through the arena and, when attribution is on, records whom it waited
// for.
func (c *Comm) execArena(ctx context.Context, seq uint64, kind collKind, buf Buffer, op ReduceOp, root int, limit time.Duration) error {
	ac := c.arena
	var start time.Time
	attributed := c.attr.on.Load()
	if attributed {
		start = time.Now()
		ac.blocked = 0
	}
	ac.timed = attributed
	err := c.arenaCall(ctx, seq, kind, buf, op, root)
	ac.timed = false
	if err == nil && attributed {
		err = c.arenaAttribute(ctx, seq, kind, len(buf.Bytes), start, time.Now())
	}
	if err != nil {
		return c.callErr(ctx, kind, seq, limit, err)
	}
	return nil
}

// arenaAttribute publishes this rank's stamps of call seq, waits for every rank's and records
// the verdict as an attributed schedule call does.
func (c *Comm) arenaAttribute(ctx context.Context, seq uint64, kind collKind, bytes int, start, end time.Time) error {
	ac, a := c.arena, &c.attr
	p, me := ac.p, ac.rank
	off := ac.stampOff(me)
	arenaWord64(ac.mem, off).Store(uint64(start.UnixNano()))
	arenaWord64(ac.mem, off+8).Store(uint64(ac.blocked))
	if err := c.arenaBarrier(ctx, seq, false, nil); err != nil {
		return err
	}
	row := stampHead + 2*p
	a.table = grow(a.table, p*row)
	clear(a.table)
	for r := range p {
		off := ac.stampOff(r)
		a.table[r*row+stampStart] = int64(arenaWord64(ac.mem, off).Load())
		a.table[r*row+stampBlocked] = int64(arenaWord64(ac.mem, off+8).Load())
	}
	if err := c.arenaBarrier(ctx, seq, false, nil); err != nil {
		return err
	}
	a.waited = grow(a.waited, p)
	clear(a.waited)
	a.start, a.end = start.UnixNano(), end.UnixNano()
	a.record(seq, kind, bytes, p, me)
	return nil
}
