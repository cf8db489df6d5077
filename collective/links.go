package collective

import (
	"fmt"
	"time"

	"github.com/hetsync/hetsync/topology"
)

func validateLinks(m *topology.Matrix, p int) error {
	if m == nil {
		return nil
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("collective: Links: %w", err)
	}
	if m.P != p {
		return fmt.Errorf("collective: Links is a matrix of %d ranks for a job of %d", m.P, p)
	}
	return nil
}

// Links is the link matrix the communicator plans from, nil when it has none: Options.Links,
// or the matrix of auto's latest re-plan. It is shared, not copied: callers must not modify it.
func (c *Comm) Links() *topology.Matrix {
	if a, ok := c.alg.(*auto); ok {
		if m := a.matrix(); m != nil {
			return m
		}
	}
	return c.opts.Links
}

// Choice is how a communicator runs an allreduce of a given size: Algorithm is the
// configuration's name as Options.Algorithm takes it ("hier-ring/grouped", "butterfly/rank";
// auto's choice for auto, "arena" when auto runs it over the job's shared arena, which has no
// prediction) and Predicted the time the simulator gives it on the link matrix (on one α-β
// pair for every link without one).
type Choice struct {
	Algorithm string
	Predicted time.Duration
}

// AllReduceChoice says what an allreduce of n elements of dt runs on this communicator and
// how long the simulator predicts it takes. Every rank gets the same answer.
func (c *Comm) AllReduceChoice(n int, dt DType) (Choice, error) {
	if dt.Size() == 0 || n < 0 {
		return Choice{}, fmt.Errorf("rank %d: AllReduceChoice: %d elements of %v", c.Rank(), n, dt)
	}
	if c.arenaTakes(kindAllReduce, n*dt.Size()) {
		return Choice{Algorithm: "arena"}, nil
	}
	p := c.Size()
	seg := c.segmentBytes(n, dt.Size())
	if k := c.allReduceChunks(kindAllReduce, n, dt.Size()); k > 1 {
		return c.chunkedChoice(n, dt, seg, k)
	}
	b := newBuilder(p, c.Rank(), n, dt.Size(), seg)
	if a, ok := c.alg.(*auto); ok {
		ch := a.decide(kindAllReduce, b)
		return Choice{Algorithm: ch.name, Predicted: seconds(ch.predicted)}, nil
	}
	net := uniformModel(AutoAlpha, AutoBeta)
	if c.opts.Links != nil {
		net = newLayout(c.opts.Links).model()
	}
	t, err := simulateKind(c.alg, kindAllReduce, p, n, dt.Size(), seg, net)
	if err != nil {
		return Choice{}, fmt.Errorf("rank %d: simulating %s: %w", c.Rank(), c.algName, err)
	}
	return Choice{Algorithm: c.algName, Predicted: seconds(t)}, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// chunkedChoice is AllReduceChoice for a call cut into k chunks (chunk.go): the algorithm of
// its first chunk, and the time of all the chunks' schedules replayed together.
func (c *Comm) chunkedChoice(n int, dt DType, seg, k int) (Choice, error) {
	p := c.Size()
	name, net := c.algName, uniformModel(AutoAlpha, AutoBeta)
	if a, ok := c.alg.(*auto); ok {
		lo, hi := Partition(n, k, 0)
		name = a.decide(kindAllReduce, newBuilder(p, c.Rank(), hi-lo, dt.Size(), seg)).name
		net = a.replayModel()
	}
	scheds := make([]*schedule, p)
	for r := range scheds {
		scheds[r] = buildChunkedAllReduce(c.alg, p, r, n, dt.Size(), seg, k)
	}
	t, err := replay(scheds, dt.Size(), net, nil)
	if err != nil {
		return Choice{}, fmt.Errorf("rank %d: simulating %s in %d chunks: %w", c.Rank(), name, k, err)
	}
	return Choice{Algorithm: name, Predicted: seconds(t)}, nil
}
