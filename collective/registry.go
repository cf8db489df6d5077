package collective

import (
	"fmt"
	"sort"
	"strings"
)

// algorithm builds the schedules of the three bandwidth-heavy collectives. Every method is a
// pure function of the builder's (p, rank, n, segment size): it appends steps and keeps no
// state between calls (auto keeps a decision cache, which is a pure function of its inputs).
type algorithm interface {
	allReduce(b *builder)
	reduceScatter(b *builder)
	allGather(b *builder)
}

// algorithmTable is the registry: names mapped to constructors, like database/sql drivers.
// It is read-only; each Comm constructs its own algorithm value.
func algorithmTable() map[string]func(opts Options) algorithm {
	return map[string]func(opts Options) algorithm{
		"ring":          func(Options) algorithm { return ring{} },
		"butterfly":     func(Options) algorithm { return butterfly{} },
		"binary-blocks": func(Options) algorithm { return binaryBlocks{} },
		"ps":            func(o Options) algorithm { return paramServer{servers: o.Servers} },
		"auto":          func(o Options) algorithm { return newAuto(o) },
	}
}

// Algorithms returns the registered algorithm names, sorted.
func Algorithms() []string {
	var names []string
	for name := range algorithmTable() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
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

func parseAlgorithm(name string) (algConfig, error) {
	var c algConfig
	rest := name
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest, c.order = rest[:i], rest[i+1:]
		if !has(orderNames(), c.order) {
			return c, fmt.Errorf("collective: algorithm %q: unknown order %q (known: %s)", name, c.order, strings.Join(orderNames(), ", "))
		}
	}
	if strings.HasPrefix(rest, hierPrefix) {
		c.hier, rest = true, strings.TrimPrefix(rest, hierPrefix)
	}
	c.base = rest
	if _, ok := algorithmTable()[c.base]; !ok {
		return c, fmt.Errorf("collective: unknown algorithm %q (known: %s, each also as %sNAME and NAME/ORDER with a link matrix; orders %s)",
			name, strings.Join(Algorithms(), ", "), hierPrefix, strings.Join(orderNames(), ", "))
	}
	if c.base == "auto" && (c.hier || c.order != "") {
		return c, fmt.Errorf("collective: algorithm %q: auto chooses the hierarchy and order itself", name)
	}
	return c, nil
}

func has[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// lookupAlgorithm builds the algorithm a name configures. Without Options.Links an algorithm
// runs in rank order; with it, "ring" takes the grouped ring order and "ps" places its
// servers from the matrix unless the name says otherwise, and the hierarchical and ordered
// configurations become available.
func lookupAlgorithm(name string, opts Options) (algorithm, error) {
	c, err := parseAlgorithm(name)
	if err != nil {
		return nil, err
	}
	base := algorithmTable()[c.base](opts)
	if opts.Links == nil {
		if c.hier || (c.order != "" && c.order != orderRank) {
			return nil, fmt.Errorf("collective: algorithm %q plans from the link matrix: set Options.Links (bench: --plan-links)", name)
		}
		return base, nil
	}
	if c.base == "auto" {
		return base, nil
	}
	return configure(c, base, newLayout(opts.Links), opts.Servers), nil
}

// configure applies a configuration's hierarchy and order to a base algorithm.
func configure(c algConfig, base algorithm, l *layout, servers int) algorithm {
	order := c.order
	if c.hier {
		if order == "" {
			order = orderGrouped
		}
		return newHierarchical(base, l, l.hostOrder(order))
	}
	if order == "" {
		order = orderRank
		if _, ok := base.(ring); ok {
			order = orderGrouped
		}
	}
	switch a := base.(type) {
	case ring:
		if order != orderRank {
			a.order = l.rankOrder(order)
		}
		return a
	case paramServer:
		if c.order == "" {
			a.place, a.weight = placeServers(l, a.k(l.p))
			return a
		}
	}
	if order == orderRank {
		return base
	}
	return permuted{inner: base, order: l.rankOrder(order)}
}

// Configurations lists the configurations a link matrix makes available, each a name that
// Options.Algorithm takes: every algorithm in every rank order, ps with servers placed from the
// matrix, and the hierarchy over each algorithm in each host order. They are auto's allreduce
// candidates less recursive doubling, in the same order.
func Configurations() []string {
	var names []string
	for _, c := range candidateConfigs(kindAllReduce, true) {
		if !strings.HasPrefix(c.name, "recursive-doubling") {
			names = append(names, c.name)
		}
	}
	return names
}
