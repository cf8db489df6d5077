package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/hetsync/hetsync"

// layer of each package directory of the module, lowest first. Within a layer imports go
// either way (Go forbids cycles anyway); across layers only downwards.
var layer = map[string]int{
	// 0: leaves every layer may use.
	"internal/freeport": 0, "internal/procstat": 0, "internal/lateconn": 0,
	"internal/schedpolicy": 0, "internal/ranktest": 0, "internal/layers": 0, "internal/rawsock": 0,
	"metrics": 0, "metrics/exporter": 0, "workload/data": 0, "compress": 0, "optim": 0,
	// 1: numeric kernels and the transport.
	"kernels": 1, "kernels/cuda": 1, "kernels/internal/cblas": 1, "workload/nn": 1,
	"transport": 1, "transport/shm": 1, "transport/p2p": 1, "transport/p2p/p2ptest": 1,
	// 2: what sits on an endpoint: services, what a job knows of its network, processes.
	"service": 2, "topology": 2, "launcher": 2, "report": 2, "internal/netns": 2,
	// 3: collectives, and running sets of jobs.
	"collective": 3, "collective/kv": 3, "experiment": 3, "service/store": 3,
	// 4: training and benchmarking over a communicator.
	"trainer": 4, "bench": 4,
	// 5: the built-in workload (it may link the CUDA backend: nothing below imports it).
	"workload": 5,
	// 6: the public face.
	"": 6,
	// 7: programs and tests of the public face.
	"capi": 7, "cmd/hetsync": 7, "command": 7, "examples/hello": 7, "examples/subcomm": 7,
	"examples/esync-model": 7, "extend": 7,
}

// TestImportsRunDownwards parses every non-test Go file of the module (all build tags) and
// fails for each import from a lower layer to a higher one, and for each package the table
// does not place.
func TestImportsRunDownwards(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{} // package dir -> module packages it imports
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "python" || name == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		dir := filepath.ToSlash(rel)
		if dir == "." {
			dir = ""
		}
		if imports[dir] == nil {
			imports[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == module {
				imports[dir][""] = true
			} else if strings.HasPrefix(p, module+"/") {
				imports[dir][strings.TrimPrefix(p, module+"/")] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	name := func(dir string) string {
		if dir == "" {
			return "hetsync (the root package)"
		}
		return dir
	}
	dirs := make([]string, 0, len(imports))
	for d := range imports {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		from, ok := layer[d]
		if !ok {
			t.Errorf("package %s has no layer: give it a row in internal/layers/layers_test.go", name(d))
			continue
		}
		for imp := range imports[d] {
			to, ok := layer[imp]
			if !ok {
				continue // reported as its own package
			}
			if to > from {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports run only downwards", name(d), from, name(imp), to)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
}
