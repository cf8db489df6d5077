// Package workload is `hetsync train`'s built-in workload: the Fashion-MNIST data set
// (workload/data), the MLP and CNN networks (workload/nn) and each rank's compute device
// (the CPU kernels, or CUDA under the cuda build tag), trained through package trainer.
//
// It sits above the trainer, not inside it: a program that trains its own model imports
// trainer (and the root package) and links neither the data set's loader, the built-in
// networks nor the CUDA backend. RunRank is a whole rank of `hetsync train`: it loads the data
// and the rank's shard, builds the network on the rank's device and hands the model to
// trainer.RunRank, which trains it and writes the run directory. MeasureStepTime is the
// built-in network's t_fast for the WBSP heterogeneity profiles.
//
// This package must never be imported by trainer, collective or transport (it would bring
// the CUDA backend back into every program), and never holds global state.
package workload
