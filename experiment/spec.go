package experiment

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hetsync/hetsync/metrics"
)

// DefaultTimeout is a run's limit when the file gives none.
const DefaultTimeout = 10 * time.Minute

// Spec is a parsed experiment file.
type Spec struct {
	File        string
	Name        string
	Description string
	Timeout     time.Duration
	Baseline    string
	// Launch, when not empty, is the command every run's train command line is started
	// under (LAUNCH... EXE train ... --out=DIR): a program that starts the run's ranks
	// somewhere other than this process's own launcher would, such as in the hosts of a
	// network of namespaces. A relative path with a '/' in Launch[0] is relative to the
	// file's directory.
	Launch []string
	Common []Setting
	Runs   []RunSpec
}

// RunSpec is one run of an experiment: its own settings over the common ones.
type RunSpec struct {
	Name     string
	Timeout  time.Duration // 0: the experiment's
	Settings []Setting
	Line     int
}

// Setting is one flag of `hetsync train`: --Key=Value.
type Setting struct {
	Key, Value string
	Line       int
}

// FlagKind is the type of a train flag's value, for checking a file before running it.
type FlagKind int

// Flag kinds.
const (
	KindString FlagKind = iota
	KindInt
	KindUint
	KindFloat
	KindDuration
	KindBool
)

func (k FlagKind) String() string {
	return [...]string{"a string", "an integer", "a non-negative integer", "a number", "a duration (90s, 2m)", "true or false"}[k]
}

// check reports whether value is of kind k.
func (k FlagKind) check(value string) bool {
	var err error
	switch k {
	case KindInt:
		_, err = strconv.ParseInt(value, 10, 64)
	case KindUint:
		_, err = strconv.ParseUint(value, 10, 64)
	case KindFloat:
		_, err = strconv.ParseFloat(value, 64)
	case KindDuration:
		_, err = time.ParseDuration(value)
	case KindBool:
		_, err = strconv.ParseBool(value)
	}
	return err == nil
}

// reservedKeys are flags the runner sets itself.
var reservedKeys = map[string]string{
	"out":    "the runner puts each run in OUT/NAME",
	"resume": "each run of an experiment is a new run in OUT/NAME; continue one with hetsync train --resume OUT/NAME",
}

// maxRunName bounds a run's name, which names the directory OUT/NAME and the log
// OUT/logs/NAME.log: a name a file system refuses (over 255 bytes) would fail only when the
// run starts.
const maxRunName = 128

var runName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// reservedRunNames are the names a run cannot take, since it names the directory OUT/NAME: the
// first two leave OUT, and the runner writes the others itself.
var reservedRunNames = map[string]string{
	".":      "OUT itself",
	"..":     "the directory above OUT",
	"report": "where the runner writes the report",
	"logs":   "where the runner writes the runs' output",
}

// MaxFileBytes bounds an experiment file: a few kilobytes of YAML in practice, and the path
// may be a device or an endless stdin.
const MaxFileBytes = 1 << 20

// Load reads and parses an experiment file; see Parse.
func Load(file string, flags map[string]FlagKind) (*Spec, error) {
	data, err := metrics.ReadFileLimit(file, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	return Parse(file, data, flags)
}

// Parse parses an experiment file's content; file names it in errors. flags, when not nil,
// are the flags of `hetsync train` with their kinds: keys that are not among them, and values
// of the wrong kind, are errors.
func Parse(file string, data []byte, flags map[string]FlagKind) (*Spec, error) {
	p := parser{file: file, flags: flags}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("experiment: %s: %w", file, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, fmt.Errorf("experiment: %s is empty", file)
	}
	spec, err := p.spec(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	return spec, nil
}

type parser struct {
	file  string
	flags map[string]FlagKind
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...))
}

// resolve follows aliases (*anchor).
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return "a scalar"
	}
	return "unknown"
}

// pairs walks a mapping, rejecting duplicate keys.
func (p *parser) pairs(n *yaml.Node, what string, each func(key string, k, v *yaml.Node) error) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, "%s must be a mapping of keys to values, not %s", what, kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, "%s: keys must be plain names", what)
		}
		if seen[k.Value] {
			return p.errorf(k, "%s: key %q given twice", what, k.Value)
		}
		seen[k.Value] = true
		if err := each(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) scalar(key string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return "", p.errorf(v, "key %q must be a single value, not %s", key, kindName(v))
	}
	return v.Value, nil
}

// command reads a command line given as a list of words (or one word): no shell splits it. A
// relative program path with a '/' is made relative to the file's directory, so the file
// works from any working directory.
func (p *parser) command(key string, v *yaml.Node) ([]string, error) {
	var words []string
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
		words = []string{v.Value}
	case v.Kind == yaml.SequenceNode:
		for _, e := range v.Content {
			e = resolve(e)
			if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
				return nil, p.errorf(e, "key %q: every word of the command must be a single value, not %s", key, kindName(e))
			}
			words = append(words, e.Value)
		}
	default:
		return nil, p.errorf(v, "key %q must be a command: a list of words, not %s", key, kindName(v))
	}
	if len(words) == 0 || words[0] == "" {
		return nil, p.errorf(v, "key %q: the command is empty", key)
	}
	if strings.Contains(words[0], "/") && !filepath.IsAbs(words[0]) {
		words[0] = filepath.Join(filepath.Dir(p.file), words[0])
		if !strings.Contains(words[0], "/") {
			words[0] = "./" + words[0] // still a path, not a name to look up on PATH
		}
	}
	return words, nil
}

func (p *parser) duration(key string, v *yaml.Node) (time.Duration, error) {
	s, err := p.scalar(key, v)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, p.errorf(v, "key %q must be a positive duration (90s, 5m), got %q", key, s)
	}
	return d, nil
}

var topKeys = []string{"name", "description", "run-timeout", "baseline", "launch", "common", "runs"}

func (p *parser) spec(root *yaml.Node) (*Spec, error) {
	s := &Spec{File: p.file, Timeout: DefaultTimeout}
	var runsNode *yaml.Node
	err := p.pairs(root, "the file", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			s.Name, err = p.scalar(key, v)
			if err == nil && !runName.MatchString(s.Name) {
				err = p.errorf(v, "name %q may hold only letters, digits, '.', '_' and '-'", s.Name)
			}
		case "description":
			s.Description, err = p.scalar(key, v)
		case "run-timeout":
			s.Timeout, err = p.duration(key, v)
		case "baseline":
			s.Baseline, err = p.scalar(key, v)
		case "launch":
			s.Launch, err = p.command(key, v)
		case "common":
			s.Common, err = p.settings(v, "common")
		case "runs":
			runsNode = v
		default:
			err = p.errorf(k, "unknown key %q (known: %s)", key, strings.Join(topKeys, ", "))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if runsNode == nil {
		return nil, fmt.Errorf("%s: no runs: add a list under \"runs:\"", p.file)
	}
	if runsNode.Kind != yaml.SequenceNode {
		return nil, p.errorf(runsNode, "runs must be a list, not %s", kindName(runsNode))
	}
	if len(runsNode.Content) == 0 {
		return nil, p.errorf(runsNode, "runs is empty")
	}
	seen := map[string]int{}
	for _, rn := range runsNode.Content {
		r, err := p.run(resolve(rn))
		if err != nil {
			return nil, err
		}
		if line, dup := seen[r.Name]; dup {
			return nil, p.errorf(rn, "run name %q is used twice (first on line %d)", r.Name, line)
		}
		seen[r.Name] = r.Line
		s.Runs = append(s.Runs, r)
	}
	if s.Baseline != "" {
		if _, ok := seen[s.Baseline]; !ok {
			return nil, fmt.Errorf("%s: baseline %q is not the name of a run", p.file, s.Baseline)
		}
	}
	return s, nil
}

func (p *parser) run(n *yaml.Node) (RunSpec, error) {
	r := RunSpec{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return r, p.errorf(n, "each run must be a mapping with a name, not %s", kindName(n))
	}
	// name and run-timeout are the run's own; the rest are flags.
	flagsOnly := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line}
	err := p.pairs(n, "run", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			r.Name, err = p.scalar(key, v)
			if err == nil && !runName.MatchString(r.Name) {
				err = p.errorf(v, "run name %q may hold only letters, digits, '.', '_' and '-' (it names a directory)", r.Name)
			}
			if err == nil && len(r.Name) > maxRunName {
				err = p.errorf(v, "run name of %d characters: at most %d (it names a directory and a log file)", len(r.Name), maxRunName)
			}
			if what, reserved := reservedRunNames[r.Name]; err == nil && reserved {
				err = p.errorf(v, "run name %q is reserved: OUT/%s is %s", r.Name, r.Name, what)
			}
		case "run-timeout":
			r.Timeout, err = p.duration(key, v)
		default:
			flagsOnly.Content = append(flagsOnly.Content, k, v)
		}
		return err
	})
	if err != nil {
		return r, err
	}
	if r.Name == "" {
		return r, p.errorf(n, "run has no name")
	}
	r.Settings, err = p.settings(flagsOnly, fmt.Sprintf("run %q", r.Name))
	return r, err
}

// settings reads a mapping of train flags.
func (p *parser) settings(n *yaml.Node, where string) ([]Setting, error) {
	var out []Setting
	err := p.pairs(n, where, func(key string, k, v *yaml.Node) error {
		if why, ok := reservedKeys[key]; ok {
			return p.errorf(k, "%s: key %q cannot be set here: %s", where, key, why)
		}
		kind, known := KindString, true
		if p.flags != nil {
			kind, known = p.flags[key]
		}
		if !known {
			return p.errorf(k, "%s: unknown key %q: not a flag of hetsync train%s", where, key, suggest(key, p.flags))
		}
		var value string
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			value = v.Value
		case v.Kind == yaml.SequenceNode && kind == KindString:
			parts := make([]string, len(v.Content))
			for i, e := range v.Content {
				e = resolve(e)
				if e.Kind != yaml.ScalarNode {
					return p.errorf(e, "%s: key %q: list entries must be single values, not %s", where, key, kindName(e))
				}
				parts[i] = e.Value
			}
			value = strings.Join(parts, ",")
		default:
			return p.errorf(v, "%s: key %q must be %s, not %s", where, key, kind, kindName(v))
		}
		if !kind.check(value) {
			return p.errorf(v, "%s: key %q must be %s, got %q", where, key, kind, value)
		}
		out = append(out, Setting{Key: key, Value: value, Line: k.Line})
		return nil
	})
	return out, err
}

// suggest names close flags, for typos.
func suggest(key string, flags map[string]FlagKind) string {
	var close []string
	for f := range flags {
		if strings.Contains(f, key) || strings.Contains(key, f) || editDistance(f, key) <= 2 {
			close = append(close, f)
		}
	}
	if len(close) == 0 {
		return ""
	}
	sort.Strings(close)
	return " (did you mean " + strings.Join(close, ", ") + "?)"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Merged is the run's settings over the common ones: common keys in file order (with the
// run's value where it gives one), then the run's other keys in its order.
func (s *Spec) Merged(r RunSpec) []Setting {
	out := slices.Clone(s.Common)
	for _, rs := range r.Settings {
		i := slices.IndexFunc(out, func(c Setting) bool { return c.Key == rs.Key })
		if i >= 0 {
			out[i] = rs
		} else {
			out = append(out, rs)
		}
	}
	return out
}

// Command is r's whole command line: the file's Launch command, if any, then exe and
// TrainArgs.
func (s *Spec) Command(exe string, r RunSpec, outDir string) []string {
	return slices.Concat(s.Launch, []string{exe}, s.TrainArgs(r, outDir))
}

// TrainArgs is the command line after the executable: train, the merged flags and --out.
func (s *Spec) TrainArgs(r RunSpec, outDir string) []string {
	args := []string{"train"}
	for _, st := range s.Merged(r) {
		args = append(args, "--"+st.Key+"="+st.Value)
	}
	return append(args, "--out="+outDir)
}

// RunTimeout is r's limit.
func (s *Spec) RunTimeout(r RunSpec) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}
