package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks errors in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run is main without the process: it runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	// bench re-runs this command line once per rank.
	app.Metadata = map[string]any{"args": args}
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

func newApp(stdout, stderr io.Writer) *cli.App {
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
		Commands:       []*cli.Command{launchCommand(), benchCommand(), trainCommand(), experimentCommand(), reportCommand(), versionCommand(), superviseCommand(), planCommand()},
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
