// Package extend holds tests of hetsync's extension points: what a program outside the
// module's packages adds through the public API alone, run the way the command line runs the
// built-in ones.
//
//   - algorithm_test.go defines a collective algorithm (reduce to rank 0, then broadcast) as a
//     schedule builder, registers it in a registry of its own and runs it by name and through
//     auto, over the in-memory transport, real libp2p hosts and hetsync.InitLocal.
//   - command_test.go builds the command line with both (command.Main with its Options) and
//     runs `hetsync train --sync local-sgd --sync-period 3 --collective reduce-broadcast`, as a
//     program that ships its own hetsync binary does.
//   - strategy_test.go defines a synchronization strategy in step-by-step form, registers it
//     in a registry of its own, gives it options as `hetsync train` gives a strategy's options
//     flags, and trains the built-in workload with it on three ranks through the path
//     `hetsync train`'s ranks run (hetsync.InitLocal, workload.RunRank), on the small data set
//     in Fashion-MNIST's layout under testdata/.
//
// The package has no code of its own besides this doc: it must never be imported, and what
// its tests need they take from the exported API only, as a user's program would.
package extend
