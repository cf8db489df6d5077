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

func lookupAlgorithm(name string, opts Options) (algorithm, error) {
	mk, ok := algorithmTable()[name]
	if !ok {
		return nil, fmt.Errorf("collective: unknown algorithm %q (known: %s)", name, strings.Join(Algorithms(), ", "))
	}
	return mk(opts), nil
}
