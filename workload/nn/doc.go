// Package nn holds the layers, models and optimizer that a hetsync worker trains: Dense,
// Conv2D, MaxPool2D, ReLU and Flatten layers ending in a softmax cross-entropy loss, the named
// models "mlp" (784-256-128-10, 235,146 parameters) and "cnn" (the LeNet-style network of the
// PyTorch anchor, 454,922 parameters), and SGD with momentum and weight decay.
//
// Every parameter of a model lives in one flat float32 vector on the model's kernels.Device,
// and the gradients in a second vector of the same layout (layer by layer, weights then
// biases; weights in PyTorch's layouts: Dense out×in, Conv2D out×in×k×k). One collective call
// therefore moves a whole model or gradient: on the CPU, Model.Params and Model.Grads are the
// live vectors.
//
// Conventions a strategy must know:
//   - ForwardBackward overwrites the gradient vector with the gradient of the mean loss over
//     the batch (not the sum: ESync's code uses sums, see docs/algorithms.md#common-rules; scale
//     the learning rate by the batch size to reproduce it).
//   - Initialisation is Glorot-uniform for weights and zero for biases, drawn from a PCG
//     generator seeded by (seed, layer index): the same seed gives bitwise-equal models.
//   - Forward and backward passes are deterministic for a given device thread count, and the
//     SGD update is elementwise, so replicas applying the same averaged gradient stay bitwise
//     identical.
//
// This package computes; it must never communicate (no collective, no transport), read files
// or keep global mutable state.
package nn
