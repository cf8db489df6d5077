package collective

import (
	"math"
	"math/bits"

	"github.com/hetsync/hetsync/topology"
)

// planNet is the network the closed-form planner prices on: the replay's model (per-pair α
// and β, host NICs and group uplinks shared by the messages that cross them, layout.model)
// read host by host, so that nothing in it grows with p² (8,192 ranks on 1,024 hosts: a
// million host pairs, not 64 million rank pairs).
type planNet struct {
	p       int
	hostOf  []int   // rank → host
	hosts   [][]int // host → its ranks
	groupOf []int   // host → group
	// links[h][g] is the link between hosts h and g, local[h] between two ranks of h; without
	// them (no matrix) every link is uniform.
	links   [][]topology.Link
	local   []topology.Link
	uniform topology.Link
	// groupLinks[a][b] is the link between any host of group a and any other host of group b
	// when the links depend on the groups alone (a two-tier network), nil otherwise; a
	// group of one host has a zero link to itself.
	groupLinks [][]topology.Link
	res        []float64 // shared resources, as layout.resources; nil: none
}

// link is the link from host h to host g (h == g: between two ranks of h).
func (net *planNet) link(h, g int) topology.Link {
	switch {
	case net.links == nil:
		return net.uniform
	case h == g:
		return net.local[h]
	}
	return net.links[h][g]
}

// hostPlanNet is the planNet of a layout.
func hostPlanNet(l *layout) *planNet {
	res, groupOf := l.resources()
	net := &planNet{p: l.p, hostOf: l.hm.Host, hosts: l.hosts, groupOf: groupOf, res: res, links: l.hm.Links, local: l.hm.Local}
	net.groupLinks = groupLinks(l.hm.Links, groupOf, len(l.groups))
	return net
}

// groupLinks is the links between groups when every host pair of two groups has the same
// link, nil otherwise.
func groupLinks(links [][]topology.Link, groupOf []int, ng int) [][]topology.Link {
	out := make([][]topology.Link, ng)
	set := make([][]bool, ng)
	for a := range out {
		out[a] = make([]topology.Link, ng)
		set[a] = make([]bool, ng)
	}
	for h, row := range links {
		for g, l := range row {
			if g == h {
				continue
			}
			a, b := groupOf[h], groupOf[g]
			if !set[a][b] {
				out[a][b], set[a][b] = l, true
			} else if out[a][b] != l {
				return nil
			}
		}
	}
	return out
}

// byGroup sums f over the hosts of every group.
func (net *planNet) byGroup(f func(h int) float64) []float64 {
	ng := 0
	for _, g := range net.groupOf {
		ng = max(ng, g+1)
	}
	out := make([]float64, ng)
	for h, g := range net.groupOf {
		out[g] += f(h)
	}
	return out
}

// uniformPlanNet is the α-β model without a matrix: every rank its own host, one link, nothing
// shared.
func uniformPlanNet(p int, alpha, beta float64) *planNet {
	hostOf := make([]int, p)
	hosts := make([][]int, p)
	for r := range p {
		hostOf[r] = r
		hosts[r] = []int{r}
	}
	return &planNet{p: p, hostOf: hostOf, hosts: hosts, groupOf: make([]int, p), uniform: topology.Link{Alpha: alpha, Beta: beta}}
}

// coster prices a schedule phase by phase. A phase is a set of messages that start together;
// it lasts as long as the busiest of: one message (its segments' α plus its bytes' β), one
// node's sends in turn (a rank sends one message at a time), one node's receives in turn, and
// one shared resource (its α plus the bytes that cross it at its β). On a phase whose
// messages all cost the same (a ring step, a butterfly step on a regular placement) this is
// the replay's time of the step without replaying it.
//
// Phases in a row overlap in the replay: a segment received and reduced is forwarded at once,
// so the next phase starts on the first segment, not after the last, and a phase that loads
// one direction of a link overlaps the next that loads the other. A run of phases (a stage)
// therefore costs between two bounds: the pipelined estimate (the busiest node or resource
// over the whole stage, plus one segment's time per phase to fill the pipeline), or the sum
// of its phases when that is less, and the sum of its phases. The replay's time lies between
// them on every matrix of the planner's tests, and they meet where phases share a bottleneck
// (a ring; a butterfly on a uniform network).
//
// Nodes are ranks (flat algorithms) or hosts (a hierarchy's inter-host part, where every host
// runs one copy of the algorithm per lane): lanes[v] is how many copies node v's busiest rank
// carries in turn, and every message crosses the shared resources resMult times.
type coster struct {
	net       *planNet
	elem, seg int   // bytes per element, elements per message
	nodeHost  []int // node → host
	lanes     []float64
	resMult   float64
	total     float64 // seconds, the lower bound
	upper     float64 // seconds, the upper bound
	msgs      float64 // messages, all ranks together
	repeat    float64
	stamp     []int
	rstamp    []int
	gen       int
	send      []float64
	recv      []float64
	nodes     []int
	rload     []float64
	ralpha    []float64
	touched   []int
	phaseMax  float64
	phaseFill float64
	phaseMsgs float64
	// The current stage: the sum of its phases, their fill, and every node's and resource's
	// busy time over the stage.
	stageSeq, stageFill float64
	sgen                int
	sstamp, srstamp     []int
	busy, rbusy         []float64
}

func newCoster(net *planNet, elem, seg int) *coster {
	c := &coster{net: net, elem: elem, seg: max(seg, 1), resMult: 1, repeat: 1}
	c.setNodes(net.hostOf, nil, 1)
	c.rstamp = make([]int, len(net.res))
	c.srstamp = make([]int, len(net.res))
	c.rload = make([]float64, len(net.res))
	c.ralpha = make([]float64, len(net.res))
	c.rbusy = make([]float64, len(net.res))
	return c
}

// setNodes makes the coster's nodes those of nodeHost, each carrying lanes[v] copies in turn
// (nil: one), every message crossing the resources resMult times.
func (c *coster) setNodes(nodeHost []int, lanes []float64, resMult float64) {
	c.flush()
	c.nodeHost, c.lanes, c.resMult = nodeHost, lanes, resMult
	if len(c.stamp) < len(nodeHost) {
		c.stamp = make([]int, len(nodeHost))
		c.send = make([]float64, len(nodeHost))
		c.recv = make([]float64, len(nodeHost))
		c.sstamp = make([]int, 2*len(nodeHost))
		c.busy = make([]float64, 2*len(nodeHost))
	}
	c.gen++ // a fresh phase and stage: stamps of another node set are stale
	c.sgen++
}

// reset starts the pricing of another candidate.
func (c *coster) reset(seg int) {
	c.total, c.upper, c.msgs, c.seg = 0, 0, 0, max(seg, 1)
	c.stageSeq, c.stageFill = 0, 0
	c.setNodes(c.net.hostOf, nil, 1)
}

// flush closes the current stage: the lesser of its phases' sum and the pipelined estimate.
func (c *coster) flush() {
	if c.stageSeq == 0 {
		return
	}
	most := 0.0
	for v := range c.sstamp {
		if c.sstamp[v] == c.sgen {
			most = math.Max(most, c.busy[v])
		}
	}
	for u := range c.srstamp {
		if c.srstamp[u] == c.sgen {
			most = math.Max(most, c.rbusy[u])
		}
	}
	c.total += math.Min(c.stageSeq, most+c.stageFill)
	c.upper += c.stageSeq
	c.stageSeq, c.stageFill = 0, 0
	c.sgen++
}

// busyFor adds t to slot i of busy, stamped per stage.
func busyFor(stamp []int, busy []float64, i, gen int, t float64) {
	if stamp[i] != gen {
		stamp[i], busy[i] = gen, 0
	}
	busy[i] += t
}

func (c *coster) lane(v int) float64 {
	if c.lanes == nil {
		return 1
	}
	return c.lanes[v]
}

func (c *coster) segments(elems int) float64 { return float64((elems + c.seg - 1) / c.seg) }

func (c *coster) touch(v int) {
	if c.stamp[v] != c.gen {
		c.stamp[v] = c.gen
		c.send[v], c.recv[v] = 0, 0
		c.nodes = append(c.nodes, v)
	}
}

func (c *coster) load(u int, bytes, alpha float64) {
	if c.rstamp[u] != c.gen {
		c.rstamp[u] = c.gen
		c.rload[u], c.ralpha[u] = 0, 0
		c.touched = append(c.touched, u)
	}
	c.rload[u] += bytes * c.resMult
	c.ralpha[u] = max(c.ralpha[u], alpha)
}

// msg adds a message of elems elements from node from to node to to the current phase.
func (c *coster) msg(from, to, elems int) {
	if elems <= 0 || from == to {
		return
	}
	hf, ht := c.nodeHost[from], c.nodeHost[to]
	l := c.net.link(hf, ht)
	segs := c.segments(elems)
	bytes := float64(elems * c.elem)
	t := segs*l.Alpha + bytes*l.Beta
	c.phaseMax = max(c.phaseMax, t)
	c.phaseFill = max(c.phaseFill, l.Alpha+min(bytes, float64(c.seg*c.elem))*l.Beta)
	c.touch(from)
	c.touch(to)
	c.send[from] += c.lane(from) * t
	c.recv[to] += c.lane(to) * bytes * l.Beta
	c.phaseMsgs += segs * c.resMult
	if hf == ht || c.net.res == nil {
		return
	}
	nh := len(c.net.hosts)
	c.load(2*hf, bytes, l.Alpha)
	c.load(2*ht+1, bytes, l.Alpha)
	if a, b := c.net.groupOf[hf], c.net.groupOf[ht]; a != b {
		c.load(2*nh+2*a, bytes, l.Alpha)
		c.load(2*nh+2*b+1, bytes, l.Alpha)
	}
}

// end closes the current phase, counted repeat times, and opens the next one.
func (c *coster) end(repeat int) {
	t := c.phaseMax
	for _, v := range c.nodes {
		t = max(t, max(c.send[v], c.recv[v]))
	}
	for _, u := range c.touched {
		t = max(t, c.ralpha[u]+c.rload[u]*c.net.res[u])
	}
	r := float64(repeat)
	c.stageSeq += r * t
	c.stageFill += r * c.phaseFill
	c.msgs += r * c.phaseMsgs
	for _, v := range c.nodes {
		busyFor(c.sstamp, c.busy, 2*v, c.sgen, r*c.send[v])
		busyFor(c.sstamp, c.busy, 2*v+1, c.sgen, r*c.recv[v])
	}
	for _, u := range c.touched {
		busyFor(c.srstamp, c.rbusy, u, c.sgen, r*c.rload[u]*c.net.res[u])
	}
	c.nodes, c.touched = c.nodes[:0], c.touched[:0]
	c.phaseMax, c.phaseFill, c.phaseMsgs = 0, 0, 0
	c.gen++
}

// addPhase adds a phase priced elsewhere (aggregated over hosts), a stage of its own: its
// time and messages.
func (c *coster) addPhase(t, msgs float64) {
	c.flush()
	c.total += t
	c.upper += t
	c.msgs += msgs
}

// result closes the last stage and returns the bounds of the time and the messages.
func (c *coster) result() (lo, hi, msgs float64) {
	c.flush()
	return c.total, c.upper, c.msgs
}

// ringCost: every step moves one block to the next position; 2(q-1) steps for an allreduce,
// q-1 for a reduce-scatter or an allgather.
func ringCost(c *coster, kind collKind, order []int, n int) {
	q := len(order)
	if q < 2 {
		return
	}
	blk := (n + q - 1) / q
	for i := range q {
		c.msg(order[i], order[(i+1)%q], blk)
	}
	steps := q - 1
	if kind == kindAllReduce {
		steps *= 2
	}
	c.end(steps)
}

// ringSegment is the message size ring.setSegment gives a call of n elements on q ranks.
func ringSegment(seg, n, q, elem int) int {
	blk := (n + q - 1) / max(q, 1)
	perSeg := (blk + ringMinSegments - 1) / ringMinSegments
	return max(min(seg, max(perSeg, ringMinSegmentBytes/elem)), 1)
}

// butterflyCost is butterfly's phases (fold, recursive halving, recursive doubling, unfold;
// reduce-scatter and allgather take their halves), or recursive doubling's with doubling set.
func butterflyCost(c *coster, kind collKind, order []int, n int, doubling bool) {
	q := len(order)
	if q < 2 {
		return
	}
	core := pow2Floor(q)
	rem := q - core
	blk := func(cnt int) int { return int(int64(n) * int64(cnt) / int64(q)) }
	fold := func(toCore bool, elems int) {
		for j := range rem {
			if toCore {
				c.msg(order[core+j], order[j], elems)
			} else {
				c.msg(order[j], order[core+j], elems)
			}
		}
		c.end(1)
	}
	// halvingSteps prices the halving (or, reversed, doubling) steps, repeat times: at
	// distance m, member j gives the other half of its range, m core blocks and their extras.
	halvingSteps := func(repeat int) {
		for m := core / 2; m >= 1; m /= 2 {
			for j := range core {
				if doubling {
					c.msg(order[j], order[j^m], n)
					continue
				}
				lo := j &^ (2*m - 1)
				giveLo := lo + m
				if j >= lo+m {
					giveLo = lo
				}
				extras := max(0, min(giveLo+m, rem)-giveLo)
				c.msg(order[j], order[j^m], blk(m))
				c.msg(order[j], order[j^m], blk(extras))
			}
			c.end(repeat)
		}
	}
	switch kind {
	case kindAllReduce:
		if rem > 0 {
			fold(true, n)
		}
		if doubling {
			halvingSteps(1)
		} else {
			halvingSteps(2) // the doubling steps move the same sizes in reverse
		}
		if rem > 0 {
			fold(false, n)
		}
	case kindReduceScatter:
		if rem > 0 {
			fold(true, n)
		}
		halvingSteps(1)
		if rem > 0 {
			fold(false, blk(1))
		}
	case kindAllGather:
		if rem > 0 {
			fold(true, blk(1))
		}
		halvingSteps(1)
		if rem > 0 {
			fold(false, n)
		}
	}
}

// binaryBlocksCost is binary-blocks' phases: every block's halving at once with the chain up,
// every block's doubling with the chain down; reduce-scatter and allgather end (begin) with
// the move between the largest block's units and the Partition blocks.
func binaryBlocksCost(c *coster, kind collKind, order []int, n int) {
	q := len(order)
	if q < 2 {
		return
	}
	if pow2Floor(q) == q {
		butterflyCost(c, kind, order, n, false)
		return
	}
	var sizes, offsets []int
	off := 0
	for bit := pow2Floor(q); bit >= 1; bit /= 2 {
		if q&bit != 0 {
			sizes = append(sizes, bit)
			offsets = append(offsets, off)
			off += bit
		}
	}
	b0 := sizes[0]
	// halving prices every block's halving at once (or, mirrored, its doubling), with each
	// smaller block's chain hop to the next larger block (or, mirrored, back) in the phase
	// right after that block's own halving: the small blocks finish first and hand their
	// partials up while the larger ones still halve.
	halving := func(up bool) {
		for t, step := 1, 0; t < b0; t, step = 2*t, step+1 {
			for i, s := range sizes {
				if m := s / (2 * t); m >= 1 {
					for j := range s {
						c.msg(order[offsets[i]+j], order[offsets[i]+(j^m)], n/(2*t))
					}
				}
				if i == 0 || bits.Len(uint(s))-1 != step {
					continue
				}
				ratio := sizes[i-1] / s
				for j := range s {
					for k := j * ratio; k < (j+1)*ratio; k++ {
						if up {
							c.msg(order[offsets[i]+j], order[offsets[i-1]+k], n/sizes[i-1])
						} else {
							c.msg(order[offsets[i-1]+k], order[offsets[i]+j], n/sizes[i-1])
						}
					}
				}
			}
			c.end(1)
		}
	}
	// spread moves the largest block's units (n/b0 each) to or from the q Partition blocks.
	spread := func(toBlocks bool) {
		per := (n + q - 1) / q
		for j := range b0 {
			lo, hi := Partition(n, b0, j)
			for r := lo / max(per, 1); r < q; r++ {
				rlo, rhi := Partition(n, q, r)
				if rlo >= hi {
					break
				}
				if toBlocks {
					c.msg(order[j], order[r], min(hi, rhi)-max(lo, rlo))
				} else {
					c.msg(order[r], order[j], min(hi, rhi)-max(lo, rlo))
				}
			}
		}
		c.end(1)
	}
	switch kind {
	case kindAllReduce:
		halving(true)
		halving(false)
	case kindReduceScatter:
		halving(true)
		spread(true)
	case kindAllGather:
		spread(false)
		halving(false)
	}
}
