package bench

import (
	"fmt"
	"strings"

	"github.com/hetsync/hetsync/collective"
)

// Op is the collective being measured.
type Op uint8

// Measured collectives.
const (
	AllReduce Op = iota + 1
	ReduceScatter
	AllGather
	Broadcast
	AllToAll
)

var opNames = []struct {
	op   Op
	name string
}{{AllReduce, "allreduce"}, {ReduceScatter, "reducescatter"}, {AllGather, "allgather"}, {Broadcast, "broadcast"}, {AllToAll, "alltoall"}}

func (o Op) String() string {
	for _, n := range opNames {
		if n.op == o {
			return n.name
		}
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// OpNames lists the collectives Run can measure.
func OpNames() []string {
	names := make([]string, len(opNames))
	for i, n := range opNames {
		names[i] = n.name
	}
	return names
}

// ParseOp maps a name ("allreduce", "reduce_scatter", "all-gather", ...) to an Op.
func ParseOp(s string) (Op, error) {
	t := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(strings.TrimSpace(s)))
	for _, n := range opNames {
		if n.name == t {
			return n.op, nil
		}
	}
	return 0, fmt.Errorf("unknown op %q (known: %s)", s, strings.Join(OpNames(), ", "))
}

// ParseRedOp maps "sum", "avg", "min", "max", "prod" to a collective.ReduceOp.
func ParseRedOp(s string) (collective.ReduceOp, error) {
	for _, o := range []collective.ReduceOp{collective.Sum, collective.Avg, collective.Min, collective.Max, collective.Prod} {
		if strings.EqualFold(strings.TrimSpace(s), o.String()) {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown reduction %q (known: sum, avg, min, max, prod)", s)
}

// BusFactor is nccl-tests' busbw/algbw ratio for op on p ranks: the fraction of the data every
// rank must send over its link with an optimal algorithm, so that busbw is comparable with the
// hardware's link bandwidth whatever p is.
func BusFactor(op Op, p int) float64 {
	if p < 1 {
		return 0
	}
	switch op {
	case AllReduce:
		return 2 * float64(p-1) / float64(p)
	case ReduceScatter, AllGather, AllToAll:
		return float64(p-1) / float64(p)
	case Broadcast:
		return 1
	}
	return 0
}

// reduces reports whether op combines values (and so has a reduction in its row).
func (o Op) reduces() bool { return o == AllReduce || o == ReduceScatter }

// blocked reports whether op splits the buffer into p blocks; its element count is then
// rounded down to a multiple of p, as nccl-tests does.
func (o Op) blocked() bool { return o == ReduceScatter || o == AllGather || o == AllToAll }

// elements is the element count measured for a requested size: the bytes rounded down to whole
// float32 elements and, for blocked ops, to a multiple of p (at least p).
func elements(op Op, bytes int64, p int) int {
	n := int(bytes / 4)
	if op.blocked() {
		n -= n % p
		if n == 0 {
			n = p
		}
	}
	if n == 0 {
		n = 1
	}
	return n
}
