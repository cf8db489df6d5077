// Package experiment runs a set of training configurations one after another under identical
// data, seed and heterogeneity, then reports on them (report).
//
// # File format (YAML)
//
//	name: esync-demo            # optional; names the default output directory
//	description: free text      # optional
//	run-timeout: 3m             # optional per-run limit (default 10m)
//	baseline: ssgd              # optional run name for the report's speedups
//	launch: [../scripts/netns-ranks.sh]  # optional: the command each run is started under
//	common:                     # flags of `hetsync train` shared by every run
//	  np: 4
//	  transport: mem
//	  model: mlp
//	  slowdown: [1, 1, 2, 4]    # a list is joined with commas: --slowdown=1,1,2,4
//	  target-acc: 0.80
//	  max-time: 90s
//	runs:
//	  - name: ssgd              # required, distinct, [A-Za-z0-9._-]{1,128}; the run's directory
//	    sync: ssgd
//	  - name: esync
//	    sync: esync
//	    run-timeout: 2m         # optional, this run only
//
// Keys of common and of a run (other than name and run-timeout) are the long flag names of
// `hetsync train`, one to one: a run's key replaces the common one, and the merged set becomes
// the command line `hetsync train --key=value …` — so every flag a strategy adds works here
// without a change to this package. When the caller gives the train command's flags (Flags),
// an unknown key or a value of the wrong type is an error naming the file, line and key;
// out is always refused (the runner sets it), and so is resume (each run is a new run in
// OUT/NAME; `hetsync train --resume OUT/NAME` continues one).
//
// # Running
//
// Each run executes `EXE train … --out=OUT/NAME` as a child process (EXE is normally the
// running hetsync binary), its output going to OUT/logs/NAME.log. A run that fails or
// passes its timeout is reported and the experiment goes on; at the end the report over the
// runs that finished is written to OUT/report/, and the experiment fails if any run did.
// An interrupted experiment (Ctrl-C) stops the run in progress and starts no other: those
// are listed as not started, not as failed.
//
// With launch, each run executes `LAUNCH... EXE train … --out=OUT/NAME` instead: the launch
// command starts the run's ranks where the file wants them (scripts/netns-ranks.sh starts
// them as adopted ranks in the hosts of a network of namespaces) and exits with the job's
// status. It finds what it needs in its arguments, where every flag is written --key=value
// (--np=8, --out=DIR), and it must stop the ranks when it receives SIGTERM: the runner stops
// a run by signalling the process group it started. A relative launch program with a '/' is
// found relative to the experiment file, so the file runs from any directory.
//
// This package must never import the launcher or a transport, run training in its own
// process, or overwrite a finished run (the trainer refuses an existing run directory).
package experiment
