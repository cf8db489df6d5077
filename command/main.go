package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/trainer"
)

// Options extend the command line: a program that registers its own strategies or
// algorithms builds its own hetsync binary around Main with them, and `hetsync train` then
// takes --sync NAME and the strategy's options as flags, and --collective NAME, as it does
// the built-in ones. The zero value is the built-in command line.
type Options struct {
	// Strategies are train's strategies (and experiment files'); nil means trainer.Builtin().
	Strategies *trainer.Registry
	// Algorithms are the collective algorithms train and bench run by name and auto chooses
	// among; nil means collective.Builtin().
	Algorithms *collective.Registry
}

func (o Options) strategies() *trainer.Registry {
	if o.Strategies == nil {
		return trainer.Builtin()
	}
	return o.Strategies
}

// Main runs the command line args (args[0] is the program) with the given extensions and
// returns the exit status: 0, 1 for a failure, 2 for a usage error, or a failed rank's.
// SIGINT, SIGTERM and SIGHUP cancel it.
func Main(args []string, stdout, stderr io.Writer, opts Options) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return runWith(ctx, args, stdout, stderr, opts)
}

// usageError marks errors in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run is Main without the signals and extensions: it runs the command line args and returns
// the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr, Options{})
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, opts Options) int {
	app := newApp(stdout, stderr, opts)
	// bench re-runs this command line once per rank.
	app.Metadata = map[string]any{"args": args, optionsKey: opts}
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	printError(stderr, err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return 2
	case errors.As(err, new(*launcher.RankFailure)), errors.As(err, new(*launcher.Interrupted)),
		errors.As(err, new(*launcher.TimedOut)):
		return launcher.ExitCode(err)
	}
	return 1
}

// printError prints err with one "hetsync: " line per line of its text: errors.Join puts each
// error it joins on a line of its own (a run that failed and then could not record its end),
// and each then reads as an error of its own, as a log scanner or a user grepping for
// "hetsync:" expects.
func printError(w io.Writer, err error) {
	for line := range strings.SplitSeq(strings.TrimRight(err.Error(), "\n"), "\n") {
		fmt.Fprintf(w, "hetsync: %s\n", line)
	}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	return usageError{explainUsageError(c, err)}
}

// optionsKey is where the app's Metadata holds its Options.
const optionsKey = "options"

// optionsOf is the Options of the app c runs in.
func optionsOf(c *cli.Context) Options {
	if c != nil && c.App != nil {
		if o, ok := c.App.Metadata[optionsKey].(Options); ok {
			return o
		}
	}
	return Options{}
}

func newApp(stdout, stderr io.Writer, opts Options) *cli.App {
	installHelpPrinter()
	return &cli.App{
		Name:            "hetsync",
		Usage:           "collective communication and training on heterogeneous clusters",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by run, and turned into exit statuses there.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Commands:       []*cli.Command{launchCommand(), benchCommand(), trainCommand(opts), experimentCommand(), reportCommand(), versionCommand(), superviseCommand(), planCommand()},
		Action:         unknownCommand,
	}
}

// unknownCommand runs when no command matched: without arguments it shows the help, with
// some it is a usage error that lists the commands.
func unknownCommand(c *cli.Context) error {
	switch {
	case c.NArg() == 0 || c.Args().Slice()[0] == "help" && c.NArg() == 1:
		return cli.ShowAppHelp(c)
	case c.Args().First() == "help" && c.App.Command(c.Args().Get(1)) != nil:
		return cli.ShowCommandHelp(c, c.Args().Get(1))
	}
	name := c.Args().First()
	if name == "help" {
		name = c.Args().Get(1)
	}
	var names []string
	for _, cmd := range c.App.VisibleCommands() {
		names = append(names, cmd.Name)
	}
	return usagef("unknown command %q (commands: %s; hetsync COMMAND --help for its flags)", name, strings.Join(names, ", "))
}
