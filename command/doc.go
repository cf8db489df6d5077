// Package command is the command line of the hetsync runtime, which cmd/hetsync runs. A
// program that registers its own strategies or collective algorithms builds its own hetsync
// with them: command.Main(os.Args, os.Stdout, os.Stderr, command.Options{Strategies: reg}).
//
//	hetsync launch -np N [--] COMMAND ARGS...   start N ranks of COMMAND, here or over SSH (-H, --hostfile)
//	hetsync bench  -np N --collective ring ...  the collective micro-benchmark (nccl-tests style)
//	hetsync train  -np N --sync esync ...       train on Fashion-MNIST with a synchronization strategy
//	hetsync experiment FILE.yaml                run a set of trainings one after another, then report
//	hetsync report RUN_DIR... [--out DIR]       tables and figures comparing finished runs
//	hetsync version
//
// `hetsync COMMAND --help` lists the command's flags by category (job, training, strategy,
// heterogeneity, output, transport, hosts), each with its one default, wrapped to the
// terminal's width (help.go); docs/using.md explains the flags whose help is only a line.
// -n is -np, as in mpirun (bench keeps nccl-tests' -n, the iteration count).
//
// Every subcommand validates its flags up front and names the offending flag in its error.
// Exit status: 0 on success; a launched job that failed exits with the first failed rank's
// status (128+signal when it was killed), 130 when interrupted, 1 for any other error, 2 for
// bad usage.
//
// The command wires packages together and holds no logic of its own that a library user would
// need: launching is package launcher, forming a rank's job is hetsync.Init and
// hetsync.InitLocal (the same calls a user's program makes), measuring is package
// bench, training is package trainer (and experiment, report). It
// keeps no global state; the one global it sets is urfave/cli's help printer, once, when
// the first app is built (newApp), because urfave/cli v2 has no per-app printer.
package command
