package command

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// The flag categories of a command's help, in the order it lists them: like mpirun's and
// torchrun's help, a command with dozens of flags shows them in groups a reader can skip.
const (
	catJob        = "Job"
	catBenchmark  = "Benchmark"
	catTraining   = "Training"
	catStrategy   = "Strategy"
	catHetero     = "Heterogeneity"
	catOutput     = "Output"
	catTransport  = "Transport"
	catHosts      = "Hosts (SSH)"
	catOther      = "Other"
	helpMaxWidth  = 100 // wider lines are hard to read even on a wide terminal
	helpMinWidth  = 40
	helpNoTTY     = 80 // the width of help written to a file or a pipe
	helpNameWidth = 26 // the column where a flag's description starts
)

var categoryOrder = []string{catJob, catBenchmark, catTraining, catStrategy, catHetero, catOutput, catTransport, catHosts, catOther}

// inCategory puts each flag of flags that has no category yet into cat and returns flags. A
// flag that sets its own Category keeps it, so a group of flags can be placed as a whole while
// one of them goes elsewhere. Every urfave/cli v2 flag type has a Category field; reflection
// reaches it without a case per type (a new flag type then needs no change here).
func inCategory(cat string, flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		v := reflect.ValueOf(f)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			continue
		}
		field := v.Elem().FieldByName("Category")
		if field.IsValid() && field.CanSet() && field.Kind() == reflect.String && field.String() == "" {
			field.SetString(cat)
		}
	}
	return flags
}

// installHelpPrinter makes a command's help go through writeCommandHelp, grouped and wrapped;
// the app's own help (the list of commands) keeps urfave/cli's template. urfave/cli v2 reads
// its printer from a package variable only, so newApp installs it, once per process, rather
// than an init function doing so for every importer of this package's code.
var installHelpPrinter = sync.OnceFunc(func() {
	plain := cli.HelpPrinter
	cli.HelpPrinter = func(w io.Writer, templ string, data any) {
		if c, ok := data.(*cli.Command); ok {
			writeCommandHelp(w, c, helpWidth(w, os.Getenv))
			return
		}
		plain(w, templ, data)
	}
})

// helpWidth is the width help is wrapped to: $COLUMNS, else the terminal's width when w is
// one, else helpNoTTY; never more than helpMaxWidth or less than helpMinWidth.
func helpWidth(w io.Writer, getenv func(string) string) int {
	width := helpNoTTY
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS"))); err == nil && n > 0 {
		width = n
	} else if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			width = int(ws.Col)
		}
	}
	return min(max(width, helpMinWidth), helpMaxWidth)
}

// writeCommandHelp writes c's help: its usage line, description, and flags by category, each
// line at most width columns (a single word longer than that stays whole).
func writeCommandHelp(w io.Writer, c *cli.Command, width int) {
	name := c.HelpName
	if name == "" {
		name = c.Name
	}
	usage := name + " [options]"
	if c.ArgsUsage != "" {
		usage += " " + c.ArgsUsage
	}
	fmt.Fprintf(w, "Usage: %s\n", usage)
	for _, l := range wrapWords(c.Usage, width) {
		fmt.Fprintln(w, l)
	}
	for _, para := range strings.Split(strings.TrimSpace(c.Description), "\n\n") {
		if para == "" {
			continue
		}
		fmt.Fprintln(w)
		for _, l := range wrapWords(strings.Join(strings.Fields(para), " "), width) {
			fmt.Fprintln(w, l)
		}
	}
	groups := map[string][]cli.Flag{}
	var help []cli.Flag
	for _, f := range c.VisibleFlags() {
		cat := flagCategory(f)
		if cat == "" {
			help = append(help, f) // --help, which cli adds to every command
			continue
		}
		groups[cat] = append(groups[cat], f)
	}
	cats := slices.Clone(categoryOrder)
	for cat := range groups {
		if !slices.Contains(cats, cat) {
			cats = append(cats, cat)
		}
	}
	for _, cat := range cats {
		if len(groups[cat]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", cat)
		for _, f := range groups[cat] {
			writeFlagHelp(w, f, width)
		}
	}
	if len(help) > 0 {
		fmt.Fprintln(w)
		for _, f := range help {
			writeFlagHelp(w, f, width)
		}
	}
}

// flagCategory is f's category ("" for a flag without one).
func flagCategory(f cli.Flag) string {
	if v, ok := f.(cli.CategorizableFlag); ok {
		return v.GetCategory()
	}
	return ""
}

// writeFlagHelp writes one flag: its names and value placeholder, then its description and
// default, wrapped to width and indented to helpNameWidth.
func writeFlagHelp(w io.Writer, f cli.Flag, width int) {
	names, text := flagHelp(f)
	left := "  " + names
	indent := strings.Repeat(" ", helpNameWidth)
	lines := wrapWords(text, width-helpNameWidth)
	if utf8.RuneCountInString(left) > helpNameWidth-2 || len(lines) == 0 {
		fmt.Fprintln(w, left)
	} else {
		fmt.Fprintf(w, "%-*s%s\n", helpNameWidth, left, lines[0])
		lines = lines[1:]
	}
	for _, l := range lines {
		fmt.Fprintln(w, indent+l)
	}
}

// flagHelp is f as its help shows it: "--np, -n N" and "number of ranks (default: ...)".
func flagHelp(f cli.Flag) (names, text string) {
	d, _ := f.(cli.DocGenerationFlag)
	var usage, placeholder string
	if d != nil {
		placeholder, usage = unquoteUsage(d.GetUsage())
	}
	var ns []string
	for _, n := range f.Names() {
		if len(n) == 1 {
			ns = append(ns, "-"+n)
		} else {
			ns = append(ns, "--"+n)
		}
	}
	names = strings.Join(ns, ", ")
	if d != nil && d.TakesValue() {
		if placeholder == "" {
			placeholder = valuePlaceholder(f)
		}
		names += " " + placeholder
	}
	text = usage
	if env := envVarsOf(d); env != "" {
		text += " (" + env + ")"
	}
	if def := flagDefault(f); def != "" {
		text += " (default: " + def + ")"
	}
	return names, strings.TrimSpace(text)
}

// unquoteUsage splits a usage into its placeholder and text as urfave/cli does: the first
// `QUOTED` word names the value and is shown without its quotes.
func unquoteUsage(usage string) (placeholder, text string) {
	before, rest, ok := strings.Cut(usage, "`")
	if !ok {
		return "", usage
	}
	name, after, ok := strings.Cut(rest, "`")
	if !ok {
		return "", usage
	}
	return name, before + name + after
}

// envVarsOf lists the variables a flag reads, "$A, $B".
func envVarsOf(d cli.DocGenerationFlag) string {
	if d == nil {
		return ""
	}
	var vs []string
	for _, v := range d.GetEnvVars() {
		vs = append(vs, "$"+v)
	}
	return strings.Join(vs, ", ")
}

// flagDefault is the default help prints for f: its DefaultText, else its value unless that is
// a zero (a zero means "none" or "not set": a flag whose zero stands for something else says
// what in its DefaultText).
func flagDefault(f cli.Flag) string {
	d, ok := f.(cli.DocGenerationFlag)
	if !ok || !d.TakesValue() {
		return ""
	}
	def := d.GetDefaultText()
	if s, err := strconv.Unquote(def); err == nil {
		def = s
	}
	if isZeroDefault(f, def) {
		return ""
	}
	return def
}

// isZeroDefault reports whether def is the zero value of f's kind with no DefaultText set.
func isZeroDefault(f cli.Flag, def string) bool {
	v := reflect.ValueOf(f)
	if v.Kind() == reflect.Pointer {
		if t := v.Elem().FieldByName("DefaultText"); t.IsValid() && t.String() != "" {
			return false
		}
	}
	switch def {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// valuePlaceholder names the value a flag takes when its usage names none.
func valuePlaceholder(f cli.Flag) string {
	switch f.(type) {
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return "N"
	case *cli.Float64Flag:
		return "X"
	case *cli.DurationFlag:
		return "DURATION"
	}
	return "VALUE"
}

// wrapWords breaks s into lines of at most width columns at spaces; a word longer than width
// gets a line of its own.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// badFlagValue matches the standard flag package's error for a value that does not parse.
var badFlagValue = regexp.MustCompile(`^invalid value "(.*)" for flag -(\S+): `)

// explainUsageError turns the flag parser's error for a duration given without a unit
// (--peer-timeout 8) into one that says what is missing.
func explainUsageError(c *cli.Context, err error) error {
	m := badFlagValue.FindStringSubmatch(err.Error())
	if m == nil || c == nil || c.Command == nil {
		return err
	}
	value, name := m[1], m[2]
	for _, f := range c.Command.Flags {
		if _, ok := f.(*cli.DurationFlag); !ok || !slices.Contains(f.Names(), name) {
			continue
		}
		if _, perr := strconv.ParseFloat(value, 64); perr == nil {
			return fmt.Errorf("%s %s: a duration needs a unit, e.g. %ss or %sms", dashed(name), value, value, value)
		}
		return fmt.Errorf("%s %q: not a duration (e.g. 8s, 500ms, 1m30s)", dashed(name), value)
	}
	return err
}

// dashed is a flag name as the command line writes it: -x or --name.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
