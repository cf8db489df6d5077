// Package optim holds the optimizers the trainer's workers step on a model's flat float32
// parameter vector: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW, each
// with PyTorch's semantics (torch.optim), behind one small Optimizer interface and registered
// by name in a Registry, so that a program adds its own optimizer as it adds its own
// strategy, and `hetsync train --optimizer NAME` chooses one per run.
//
// An optimizer is deterministic and elementwise: replicas that apply the same gradients from
// the same state hold bitwise-equal parameters and state afterwards, which the synchronous
// strategies rely on to keep one model on every rank. Its state (SGD's velocity, Adam's step
// count and moments) is bytes (AppendState, LoadState), so that a checkpoint restores it
// exactly and a resumed run continues bitwise where the interrupted one stopped.
//
// The package must never allocate per step in steady state (the state is allocated at the
// first step), never keep a reference to the caller's gradient, and never hold global state:
// Builtin returns a fresh Registry each time.
package optim
