package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/experiment"
	"github.com/hetsync/hetsync/trainer"
)

// trainFlagKinds lists the flags of `hetsync train` with their value kinds, so that an
// experiment file is checked against the very flags its runs will be given.
func trainFlagKinds(opts Options) map[string]experiment.FlagKind {
	kinds := map[string]experiment.FlagKind{}
	for _, f := range trainCommand(opts).Flags {
		k := experiment.KindString
		switch f.(type) {
		case *cli.IntFlag, *cli.Int64Flag:
			k = experiment.KindInt
		case *cli.UintFlag, *cli.Uint64Flag:
			k = experiment.KindUint
		case *cli.Float64Flag:
			k = experiment.KindFloat
		case *cli.DurationFlag:
			k = experiment.KindDuration
		case *cli.BoolFlag:
			k = experiment.KindBool
		}
		for _, n := range f.Names() {
			kinds[n] = k
		}
	}
	return kinds
}

func experimentCommand() *cli.Command {
	return &cli.Command{
		Name:         "experiment",
		OnUsageError: onUsageError,
		Usage:        "run the training runs of a YAML file, then report on them",
		ArgsUsage:    "FILE.yaml",
		Description: "experiment runs `hetsync train` once per entry of the file's runs list, one after another,\n" +
			"with the file's common flags (same data, seed and heterogeneity) and the run's own flags\n" +
			"(YAML keys are train's flag names), each into OUT/NAME with its log in OUT/logs/NAME.log, then\n" +
			"writes the report over the finished runs into OUT/report. A failed or timed-out run is reported\n" +
			"and the rest go on; the exit status is non-zero if any failed. See experiment for the\n" +
			"file format.",
		Flags: inCategory(catOutput,
			&cli.StringFlag{Name: "out", DefaultText: "runs/experiment-NAME-TIME", Usage: "experiment directory"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the command lines and do nothing"},
		),
		Action: func(c *cli.Context) error {
			args, err := trailingFlags(c, "experiment", "out", "dry-run")
			if err != nil {
				return err
			}
			if len(args) != 1 {
				return usagef("experiment: give exactly one experiment file, got %d arguments %q", len(args), args)
			}
			file := args[0]
			spec, err := experiment.Load(file, trainFlagKinds(optionsOf(c)))
			if err != nil {
				return usageError{err}
			}
			if err := checkRunStrategies(file, spec, optionsOf(c).strategies()); err != nil {
				return usageError{err}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("experiment: finding this executable to run train: %w", err)
			}
			out := c.String("out")
			if out == "" {
				name := spec.Name
				if name == "" {
					name = filepath.Base(file)
					name = name[:len(name)-len(filepath.Ext(name))]
				}
				out = filepath.Join("runs", "experiment-"+name+"-"+time.Now().UTC().Format("20060102-150405"))
			}
			rn := &experiment.Runner{Exe: exe, Out: out, Progress: c.App.Writer, DryRun: c.Bool("dry-run")}
			_, err = rn.Run(c.Context, spec)
			return err
		},
	}
}

// checkRunStrategies refuses, before any run starts, a run whose merged settings give an
// option of a strategy other than the run's own: train would refuse it, and an experiment
// would find out only when it reaches that run. A common option of one strategy belongs in the
// runs of that strategy.
func checkRunStrategies(file string, spec *experiment.Spec, reg *trainer.Registry) error {
	for _, r := range spec.Runs {
		set := map[string]bool{}
		sync := trainer.DefaultConfig().Strategy
		for _, st := range spec.Merged(r) {
			set[st.Key] = true
			if st.Key == "sync" {
				sync = st.Value
			}
		}
		if err := reg.CheckOptionFlags(sync, func(f string) bool { return set[f] }); err != nil {
			return fmt.Errorf("%s:%d: run %q: %w", file, r.Line, r.Name, err)
		}
	}
	return nil
}

// trailingFlags returns the command's positional arguments after setting the named flags that
// follow them (`report DIR1 DIR2 --out X`: the flag parser stops at the first argument).
// Boolean flags take no value; the others take the next argument or =value.
func trailingFlags(c *cli.Context, cmd string, names ...string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	var pos []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			return nil, usagef("%s: flag provided but not defined: %s", cmd, a)
		}
		isBool := false
		for _, f := range c.Command.Flags {
			if _, ok := f.(*cli.BoolFlag); ok && f.Names()[0] == name {
				isBool = true
			}
		}
		switch {
		case isBool && !hasValue:
			value = "true"
		case !hasValue:
			if i+1 >= len(args) {
				return nil, usagef("%s: flag needs an argument: %s", cmd, a)
			}
			i++
			value = args[i]
		}
		if err := c.Set(name, value); err != nil {
			return nil, usagef("%s: %s: %v", cmd, a, err)
		}
	}
	return pos, nil
}
