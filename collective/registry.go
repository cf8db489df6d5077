package collective

import (
	"fmt"
	"slices"
	"strings"
)

// Algorithm builds one rank's part of the three bandwidth-heavy collectives as a schedule: the
// messages it sends and receives, in order, over ranges of the call's buffer. Every method is
// a pure function of the builder's call (Ranks, Rank, Len and the segment size the builder
// cuts messages into): it adds steps and keeps no state between calls, so that the same value
// serves every rank, execution, the schedule checker and auto's simulator.
//
// What each method must leave behind, on every rank, when all ranks run their schedules:
//   - AllReduce: every element of the buffer reduced over all ranks;
//   - ReduceScatter: the rank's own block (Builder.Block(Rank)) reduced over all ranks;
//   - AllGather: every rank's block as that rank held it (each rank starts with its own block).
//
// A rank with nothing to do adds no steps; a call of one rank or no elements never reaches
// the algorithm.
type Algorithm interface {
	AllReduce(b *Builder)
	ReduceScatter(b *Builder)
	AllGather(b *Builder)
}

// Builder is how an Algorithm adds one rank's steps. Ranges are in elements of the call's
// buffer, [lo, hi); a range larger than the call's segment size is cut into segments, the
// same way at both ends, so a sender's and its receiver's messages match one for one. Steps
// run in the order they were added, as far as their data allows: a send waits for the
// receives before it that write what it reads, a receive for the sends before it that read
// what it overwrites, and everything else overlaps. A step naming a peer or range outside the
// call is not added; the schedule then fails with an error that names the step.
type Builder builder

// Ranks is the number of ranks of the call.
func (b *Builder) Ranks() int { return b.p }

// Rank is the rank whose schedule is being built.
func (b *Builder) Rank() int { return b.rank }

// Len is the number of elements of the call's buffer.
func (b *Builder) Len() int { return b.n }

// Block is rank i's block under Partition: the range a reduce-scatter leaves reduced on rank i
// and an allgather starts from.
func (b *Builder) Block(i int) (lo, hi int) { return Partition(b.n, b.p, i) }

// Send sends elements [lo, hi) to peer.
func (b *Builder) Send(peer, lo, hi int) {
	if b.valid("Send", peer, lo, hi) {
		(*builder)(b).send(peer, lo, hi)
	}
}

// Recv receives elements [lo, hi) from peer into the buffer, replacing what was there.
func (b *Builder) Recv(peer, lo, hi int) {
	if b.valid("Recv", peer, lo, hi) {
		(*builder)(b).recv(peer, lo, hi)
	}
}

// RecvReduce receives elements [lo, hi) from peer and reduces them into the buffer with the
// call's reduction.
func (b *Builder) RecvReduce(peer, lo, hi int) {
	if b.valid("RecvReduce", peer, lo, hi) {
		(*builder)(b).recvReduce(peer, lo, hi)
	}
}

// valid reports whether a step's peer and range lie inside the call, and records the first
// that does not.
func (b *Builder) valid(what string, peer, lo, hi int) bool {
	if peer >= 0 && peer < b.p && lo >= 0 && lo <= hi && hi <= b.n {
		return true
	}
	if b.err == nil {
		b.err = fmt.Errorf("rank %d of %d: %s(peer %d, [%d, %d)) outside the call of %d elements",
			b.rank, b.p, what, peer, lo, hi, b.n)
	}
	return false
}

// algorithm is how the package runs any algorithm: the built-in ones implement it directly on
// the package's builder; one registered from outside runs through external.
type algorithm interface {
	allReduce(b *builder)
	reduceScatter(b *builder)
	allGather(b *builder)
}

// external runs an Algorithm registered from outside the package.
type external struct{ Algorithm }

func (e external) allReduce(b *builder)     { e.AllReduce((*Builder)(b)) }
func (e external) reduceScatter(b *builder) { e.ReduceScatter((*Builder)(b)) }
func (e external) allGather(b *builder)     { e.AllGather((*Builder)(b)) }

// What an algorithm may implement beyond algorithm, for the configurations a link matrix makes
// (configure): an algorithm with neither runs a rank order by renumbering its allreduce
// (permuted) and its reduce-scatter and allgather in rank order.
type (
	// reorderer runs every collective in any rank order and keeps each rank's own block (the
	// ring): its configurations renumber all three collectives, and its order by default is
	// the grouped one, which crosses each thin link as few times as possible.
	reorderer interface {
		inOrder(order []int) algorithm
	}
	// placer places itself on the hosts of a layout when the name gives no order (the
	// parameter server's servers); auto considers it only with a link matrix, whose shared
	// host links show what its incast costs.
	placer interface {
		placed(l *layout) algorithm
	}
	// sharded takes Options.Servers (the parameter server).
	sharded interface {
		withServers(k int) algorithm
	}
)

// Registry maps algorithm names to the algorithms that build their schedules, like
// database/sql's drivers and the trainer's strategies. It is a value, not a package table:
// Builtin returns one holding this package's algorithms, a program adds its own with Register,
// and Options.Registry hands it to a communicator. auto draws its candidates from it, in the
// order the algorithms were registered (the order breaks auto's ties). Register every
// algorithm before the registry is handed to New (New takes a copy), the same ones in the same
// order on every rank: each rank decides alone, so ranks whose auto chooses among different
// algorithms fail their first call (the op signature names the registry).
type Registry struct {
	entries []regEntry
	// arena: auto runs the calls its rules give the job's shared arena (arena_allreduce.go's
	// arenaTakes) there when the endpoint has one, ahead of every schedule.
	arena bool
}

// regEntry is one registered algorithm.
type regEntry struct {
	name string
	alg  algorithm
	// unnamed: auto's candidate only, not a name Options.Algorithm takes.
	unnamed bool
	// allReduceOnly: auto considers it for allreduce only.
	allReduceOnly bool
	// flat: auto does not run it as a hierarchy's inter-host algorithm.
	flat bool
}

// autoName is the name that asks for auto's choice; no algorithm registers under it.
const autoName = "auto"

// NewRegistry returns a registry holding no algorithm and not the arena: auto has no
// candidate until Register adds one.
func NewRegistry() *Registry { return &Registry{} }

// Builtin returns a registry holding this package's algorithms: recursive doubling (an
// allreduce candidate of auto, not a name: it has no efficient reduce-scatter or allgather),
// butterfly, binary-blocks, ring and ps, and the arena, the path auto takes through the shared
// memory of a host's ranks when the endpoint has one (transport.Arena).
func Builtin() *Registry {
	return &Registry{arena: true, entries: []regEntry{
		{name: "recursive-doubling", alg: recursiveDoubling{}, unnamed: true, allReduceOnly: true, flat: true},
		{name: "butterfly", alg: butterfly{}},
		{name: "binary-blocks", alg: binaryBlocks{}},
		{name: "ring", alg: ring{}},
		{name: "ps", alg: paramServer{}},
	}}
}

// Register adds alg under name: Options.Algorithm then takes name (and, with a link matrix,
// name/ORDER and hier-name/ORDER), and auto considers alg for all three collectives, priced
// by replaying its schedules. Register checks alg's schedules for jobs of 1 to 9 ranks first
// (every send received, nothing deadlocked, every element reduced exactly once, every rank
// holding what the collective promises) and refuses an algorithm that fails. An empty name, a
// name with '/' or the hier- prefix, "auto" or a name already registered is refused too.
func (r *Registry) Register(name string, alg Algorithm) error {
	switch {
	case name == "":
		return fmt.Errorf("collective: registering an algorithm with an empty name")
	case alg == nil:
		return fmt.Errorf("collective: registering algorithm %q: nil Algorithm", name)
	case name == autoName || strings.ContainsRune(name, '/') || strings.HasPrefix(name, hierPrefix):
		return fmt.Errorf("collective: registering algorithm %q: the name may not be %q, contain '/' or start with %q", name, autoName, hierPrefix)
	case r.entry(name) != nil:
		return fmt.Errorf("collective: algorithm %q registered twice", name)
	}
	e := external{alg}
	if err := checkAlgorithm(e); err != nil {
		return fmt.Errorf("collective: registering algorithm %q: %w", name, err)
	}
	r.entries = append(r.entries, regEntry{name: name, alg: e})
	return nil
}

// entry is the registered algorithm named name, nil when there is none.
func (r *Registry) entry(name string) *regEntry {
	for i := range r.entries {
		if r.entries[i].name == name {
			return &r.entries[i]
		}
	}
	return nil
}

// clone is a copy of r that later Registers on r leave alone.
func (r *Registry) clone() *Registry {
	return &Registry{entries: slices.Clone(r.entries), arena: r.arena}
}

// fingerprint names r's algorithms in order and whether it holds the arena: two registries
// with the same fingerprint give auto the same candidates.
func (r *Registry) fingerprint() string {
	var b strings.Builder
	for _, e := range r.entries {
		b.WriteString(e.name)
		b.WriteByte(',')
	}
	if r.arena {
		b.WriteString("arena")
	}
	return b.String()
}

// Names returns the names Options.Algorithm takes, auto included, sorted.
func (r *Registry) Names() []string {
	names := []string{autoName}
	for _, e := range r.entries {
		if !e.unnamed {
			names = append(names, e.name)
		}
	}
	slices.Sort(names)
	return names
}

// Algorithms returns the names of the built-in algorithms, auto included, sorted.
func Algorithms() []string { return Builtin().Names() }

// registryOf is the registry a communicator with opts draws its algorithms from.
func registryOf(opts Options) *Registry {
	if opts.Registry != nil {
		return opts.Registry
	}
	return Builtin()
}

// hierPrefix and the "/ORDER" suffix make a configuration of a registered algorithm:
// "hier-ring/interleaved" is the host-aware hierarchy with a ring across hosts in interleaved
// host order. Both need Options.Links.
const hierPrefix = "hier-"

// algConfig is a parsed algorithm name.
type algConfig struct {
	base  string
	hier  bool
	order string // "" when the name gives none
}

func (r *Registry) parse(name string) (algConfig, error) {
	var c algConfig
	rest := name
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest, c.order = rest[:i], rest[i+1:]
		if !slices.Contains(orderNames(), c.order) {
			return c, fmt.Errorf("collective: algorithm %q: unknown order %q (known: %s)", name, c.order, strings.Join(orderNames(), ", "))
		}
	}
	if strings.HasPrefix(rest, hierPrefix) {
		c.hier, rest = true, strings.TrimPrefix(rest, hierPrefix)
	}
	c.base = rest
	if e := r.entry(c.base); c.base != autoName && (e == nil || e.unnamed) {
		return c, fmt.Errorf("collective: unknown algorithm %q (known: %s, each also as %sNAME and NAME/ORDER with a link matrix; orders %s)",
			name, strings.Join(r.Names(), ", "), hierPrefix, strings.Join(orderNames(), ", "))
	}
	if c.base == autoName && (c.hier || c.order != "") {
		return c, fmt.Errorf("collective: algorithm %q: auto chooses the hierarchy and order itself", name)
	}
	return c, nil
}

// lookup builds the algorithm a name configures. Without Options.Links an algorithm runs in
// rank order; with it, a reorderer (the ring) takes the grouped order and a placer (ps) places
// itself from the matrix unless the name says otherwise, and the hierarchical and ordered
// configurations become available.
func (r *Registry) lookup(name string, opts Options) (algorithm, error) {
	c, err := r.parse(name)
	if err != nil {
		return nil, err
	}
	if c.base == autoName {
		return newAuto(opts), nil
	}
	base := r.entry(c.base).alg
	if s, ok := base.(sharded); ok {
		base = s.withServers(opts.Servers)
	}
	if opts.Links == nil {
		if c.hier || (c.order != "" && c.order != orderRank) {
			return nil, fmt.Errorf("collective: algorithm %q plans from the link matrix: set Options.Links (bench: --plan-links)", name)
		}
		return base, nil
	}
	return configure(c, base, newLayout(opts.Links)), nil
}

// hasServers reports whether name is an algorithm that takes Options.Servers, as it is
// (a hierarchy or order places the servers itself).
func (r *Registry) hasServers(name string) bool {
	c, err := r.parse(name)
	if err != nil || c.base == autoName || c.hier || c.order != "" {
		return false
	}
	_, ok := r.entry(c.base).alg.(sharded)
	return ok
}

// lookupAlgorithm builds the algorithm opts name from opts' registry.
func lookupAlgorithm(name string, opts Options) (algorithm, error) {
	return registryOf(opts).lookup(name, opts)
}

// configure applies a configuration's hierarchy and order to a base algorithm.
func configure(c algConfig, base algorithm, l *layout) algorithm {
	order := c.order
	if c.hier {
		if order == "" {
			order = orderGrouped
		}
		return newHierarchical(base, l, l.hostOrder(order))
	}
	if p, ok := base.(placer); ok && order == "" {
		return p.placed(l)
	}
	ro, reorders := base.(reorderer)
	if order == "" {
		order = orderRank
		if reorders {
			order = orderGrouped
		}
	}
	switch {
	case reorders && order != orderRank:
		return ro.inOrder(l.rankOrder(order))
	case order == orderRank:
		return base
	}
	return permuted{inner: base, order: l.rankOrder(order)}
}

// Configurations lists the configurations a link matrix makes available with the built-in
// algorithms, each a name that Options.Algorithm takes: every algorithm in every rank order,
// ps with servers placed from the matrix, and the hierarchy over each algorithm in each host
// order. They are auto's allreduce candidates less recursive doubling, in the same order.
func Configurations() []string { return Builtin().Configurations() }

// Configurations lists the configurations a link matrix makes available with r's algorithms,
// as the package function does for the built-in ones.
func (r *Registry) Configurations() []string {
	var names []string
	for _, c := range r.candidateConfigs(kindAllReduce, true) {
		if !c.unnamed {
			names = append(names, c.name)
		}
	}
	return names
}

// candidateConfig is a candidate before it is fitted to a layout.
type candidateConfig struct {
	name string
	algConfig
	base    algorithm
	unnamed bool
}

// candidateConfigs lists auto's candidates for one collective kind, with or without a matrix,
// in tie-break order. Without a matrix: every algorithm auto considers for the kind, in
// registration order, less the placers (ps: in the one α-β model it has the ring's volume,
// but it is incast-sensitive on real networks, which only a matrix's shared host links show).
// With one: each such algorithm in each rank order (for reduce-scatter and allgather only the
// reorderers run other orders), then the placers placed from the matrix, then the hierarchy
// over every algorithm that runs across hosts, in each host order.
func (r *Registry) candidateConfigs(kind collKind, links bool) []candidateConfig {
	var out []candidateConfig
	considered := func(e regEntry) bool { return kind == kindAllReduce || !e.allReduceOnly }
	for _, e := range r.entries {
		if _, places := e.alg.(placer); !considered(e) || places {
			continue
		}
		if !links {
			out = append(out, candidateConfig{e.name, algConfig{base: e.name}, e.alg, e.unnamed})
			continue
		}
		_, reorders := e.alg.(reorderer)
		for _, order := range orderNames() {
			if kind != kindAllReduce && !reorders && order != orderRank {
				continue // only a reorderer renumbers reduce-scatter and allgather
			}
			out = append(out, candidateConfig{e.name + "/" + order, algConfig{base: e.name, order: order}, e.alg, e.unnamed})
		}
	}
	if !links {
		return out
	}
	for _, e := range r.entries {
		if _, places := e.alg.(placer); places && considered(e) {
			out = append(out, candidateConfig{e.name, algConfig{base: e.name}, e.alg, e.unnamed})
		}
	}
	for _, e := range r.entries {
		if e.flat || !considered(e) {
			continue
		}
		for _, order := range []string{orderGrouped, orderInterleaved} {
			name := hierPrefix + e.name + "/" + order
			out = append(out, candidateConfig{name, algConfig{base: e.name, hier: true, order: order}, e.alg, e.unnamed})
		}
	}
	return out
}
