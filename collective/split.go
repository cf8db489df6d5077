package collective

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/hetsync/hetsync/transport"
)

// Undefined is the color of a rank that joins no sub-communicator in Split (MPI_UNDEFINED).
// Every negative color means the same.
const Undefined = -1

// maxSplitAttempts bounds the rounds Split spends agreeing on a channel. A round fails only
// when another Split of a communicator sharing this rank took the proposed channel meanwhile,
// so a second round nearly always settles it.
const maxSplitAttempts = 16

// channelAllocator hands out one rank's sub-communicator channels. Every communicator that
// descends from one New shares it, so the channels of all the communicators a rank belongs to
// are distinct: a channel is taken only when it is at least next, and taking it moves next past
// it and the one after it (the communicator's point-to-point channel, see subEndpoint). Two communicators that share a pair of ranks therefore never share a channel, and two
// that share no rank may.
type channelAllocator struct {
	mu   sync.Mutex
	next int
}

func newChannelAllocator() *channelAllocator {
	return &channelAllocator{next: int(chanSubComm)}
}

// proposal is the lowest channel this rank could take now.
func (a *channelAllocator) proposal() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.next
}

// take claims ch and ch+1 for a new communicator, unless this rank already used ch or a
// channel above.
func (a *channelAllocator) take(ch int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch < a.next {
		return false
	}
	a.next = ch + 2
	return true
}

// Split partitions the communicator like MPI_Comm_split: the ranks that pass the same
// non-negative color form a new communicator, ranked by key and then by their rank here; a
// rank that passes a negative color (Undefined) gets nil. It is a collective call on c (every
// rank of c calls it, in the same place of its sequence of calls) and costs two or more small
// collectives on c.
//
// The new communicator has c's options (the algorithm, segment size, codec and timeout; "ps"
// keeps at most as many servers as it has ranks; the link matrix keeps its members' rows and
// columns and their hosts), its own sequence numbers and its own
// transport channel, agreed by its members during the call, so it never exchanges a message
// with c or any other communicator: several communicators may run at once from different
// goroutines. It shares c's endpoint and never closes it.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if color < 0 {
		color = Undefined
	}
	p, me := c.Size(), c.Rank()
	info := make([]int64, 3*p) // color, key and channel proposal of every rank
	flag := make([]int32, 1)
	ch := 0
	for attempt := 1; ; attempt++ {
		info[3*me], info[3*me+1], info[3*me+2] = int64(color), int64(key), int64(c.chans.proposal())
		// Integers: exact on the wire whatever c's codec (see codecFor).
		if err := c.run(ctx, kindAllGather, I64(info), Buffer{}, 0, 0); err != nil {
			return nil, fmt.Errorf("%s: split (color %d, key %d): %w", c.who, color, key, err)
		}
		ch = 0
		for r := 0; r < p; r++ {
			ch = max(ch, int(info[3*r+2]))
		}
		if ch+1 > math.MaxUint16 {
			// Every rank computed the same ch: they all fail here together.
			return nil, fmt.Errorf("%s: split (color %d, key %d): the %d sub-communicator channels (two per sub-communicator) are used up",
				c.who, color, key, math.MaxUint16+1-int(chanSubComm))
		}
		flag[0] = 1
		if color != Undefined && !c.chans.take(ch) {
			flag[0] = 0
		}
		if err := c.run(ctx, kindAllReduce, I32(flag), Buffer{}, Min, 0); err != nil {
			return nil, fmt.Errorf("%s: split (color %d, key %d): %w", c.who, color, key, err)
		}
		if flag[0] == 1 {
			break
		}
		if attempt == maxSplitAttempts {
			return nil, fmt.Errorf("%s: split (color %d, key %d): no channel agreed in %d rounds: other Splits on this rank's communicators keep taking them",
				c.who, color, key, attempt)
		}
	}
	if color == Undefined {
		return nil, nil
	}
	var members []int // ranks of c with this color, in their new order
	for r := 0; r < p; r++ {
		if int(info[3*r]) == color {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(info[3*a+1], info[3*b+1]) })
	jobRanks := make([]int, len(members))
	newRank := 0
	for i, r := range members {
		jobRanks[i] = c.jobRank(r)
		if r == me {
			newRank = i
		}
	}
	opts := c.opts
	opts.Servers = min(opts.Servers, len(members))
	opts.Links = opts.Links.Sub(members)
	ep := newSubEndpoint(c.base, jobRanks, newRank, transport.Channel(ch))
	who := fmt.Sprintf("rank %d (job rank %d, color %d)", newRank, jobRanks[newRank], color)
	sub, err := newComm(ep, opts, c.base, jobRanks, c.chans, who)
	if err != nil {
		return nil, fmt.Errorf("%s: split (color %d, key %d): %w", c.who, color, key, err)
	}
	return sub, nil
}

// jobRank is the rank of the job's endpoint that rank r of c is.
func (c *Comm) jobRank(r int) int {
	if c.jobRanks == nil {
		return r
	}
	return c.jobRanks[r]
}
