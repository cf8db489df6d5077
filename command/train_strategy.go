package command

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/trainer"
)

// A strategy's options reach the command line through trainer.Options.Flags: train declares
// the union of every registered strategy's flags (a flag that several strategies share, such
// as --ps-ranks, once), and after parsing hands the flags given on the command line to the
// chosen strategy's own options. A flag of a strategy that is not chosen is refused
// (trainer.Registry.CheckOptionFlags): it would be accepted and ignored.

// strategyFlagSets declares each registered strategy's options on a flag set of its own, in
// name order.
func strategyFlagSets(reg *trainer.Registry) ([]string, []*flag.FlagSet, []trainer.Options) {
	names := reg.Names()
	sets := make([]*flag.FlagSet, len(names))
	opts := make([]trainer.Options, len(names))
	for i, n := range names {
		o, _ := reg.Options(n) // n comes from the registry itself
		fs := flag.NewFlagSet(n, flag.ContinueOnError)
		o.Flags(fs)
		sets[i], opts[i] = fs, o
	}
	return names, sets, opts
}

// strategyFlags are the command-line flags of every registered strategy's options. Each
// flag's help names the strategies that take it; its type and default are the first
// declarer's.
func strategyFlags(reg *trainer.Registry) []cli.Flag {
	names, sets, _ := strategyFlagSets(reg)
	type decl struct {
		f     *flag.Flag
		users []string
	}
	byName := map[string]*decl{}
	var order []string
	for i, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			d, ok := byName[f.Name]
			if !ok {
				d = &decl{f: f}
				byName[f.Name] = d
				order = append(order, f.Name)
			}
			d.users = append(d.users, names[i])
		})
	}
	out := make([]cli.Flag, 0, len(order))
	for _, n := range order {
		d := byName[n]
		usage := strings.Join(d.users, ", ") + ": " + d.f.Usage
		out = append(out, cliFlag(d.f, usage))
	}
	return out
}

// cliFlag is f as a typed command-line flag (so that experiment files are checked against its
// kind), with f's default.
func cliFlag(f *flag.Flag, usage string) cli.Flag {
	var v any = f.DefValue
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch d := v.(type) {
	case float64:
		return &cli.Float64Flag{Name: f.Name, Value: d, Usage: usage}
	case int:
		return &cli.IntFlag{Name: f.Name, Value: d, Usage: usage}
	case uint64:
		return &cli.Uint64Flag{Name: f.Name, Value: d, Usage: usage}
	case time.Duration:
		return &cli.DurationFlag{Name: f.Name, Value: d, Usage: usage}
	case bool:
		return &cli.BoolFlag{Name: f.Name, Value: d, Usage: usage}
	}
	return &cli.StringFlag{Name: f.Name, Value: f.Value.String(), Usage: usage}
}

// strategyOptions builds the options of the strategy --sync names from its defaults and the
// strategy flags given on the command line. An unknown name is an error listing the known ones,
// and a flag of another strategy an error naming the strategies it belongs to.
func strategyOptions(c *cli.Context, reg *trainer.Registry, name string) (trainer.Options, error) {
	o, err := reg.Options(name)
	if err != nil {
		return nil, trainer.InFlags(err)
	}
	if err := reg.CheckOptionFlags(name, c.IsSet); err != nil {
		return nil, err
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o.Flags(fs)
	var setErr error
	fs.VisitAll(func(f *flag.Flag) {
		if setErr != nil || !c.IsSet(f.Name) {
			return
		}
		v := c.Value(f.Name)
		if s, ok := v.(fmt.Stringer); ok {
			v = s.String()
		}
		if err := fs.Set(f.Name, fmt.Sprint(v)); err != nil {
			setErr = fmt.Errorf("--%s: %w", f.Name, err)
		}
	})
	return o, setErr
}
