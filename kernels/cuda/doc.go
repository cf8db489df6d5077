// Package cuda is the NVIDIA GPU backend of hetsync's kernels: a kernels.Device whose tensors
// live in device memory of one GPU ("cuda:N").
//
// Build tags:
//   - cuda: the real backend (go build -tags cuda, see `make cuda`), built against CUDA 11.8
//     headers and link stubs that scripts/cuda-env.sh fetches from Debian into a cache;
//   - cudaemu: the same Device code over a host emulator that compiles the CUDA C kernels as
//     C++ and runs each block's threads as fibers (emu.cpp), with SGEMM by definition. It exists
//     so that the parity tests run on machines without a GPU (`make cuda-check`); never ship it;
//   - neither: a stub whose Open reports that CUDA support was not built in, so the default
//     build and its tests need no CUDA headers, libraries, driver or GPU.
//
// How it works:
//   - The driver API comes from gorgonia.org/cu; cuBLAS SGEMM from a small cgo binding in this
//     package (cublas.go), behind the small driver interface (driver.go) that the emulator also
//     implements. The device uses the GPU's primary context and the default stream.
//   - CUDA contexts are current per OS thread, so every method locks the calling goroutine to
//     its OS thread and makes the device's context current on it for the duration of the call.
//   - Elementwise, activation, bias, softmax cross-entropy, im2col/col2im, pooling, optimizer
//     and reduction kernels are CUDA C (kernels.h, with kernels.cu as nvcc's entry point: Go's
//     build cache tracks .h files, so the emulator is rebuilt when a kernel changes), compiled
//     once to PTX (kernels.ptx, target compute_52, ISA 7.8) by `make ptx`, committed, embedded
//     with go:embed and JIT-compiled by the driver when the device opens. Neither a build nor
//     a run needs nvcc.
//   - Convolution is im2col + cuBLAS GEMM, batched over samples.
//
// Launch arguments are 8-byte slots in the Device (gorgonia.org/cu's Launch reads 8 bytes per
// argument), so steady-state ops allocate nothing on the Go heap; a test checks it.
//
// What it must never do:
//   - import gorgonia.org/cu from a file without the cuda build tag: cu's package init() exits
//     the process when no GPU is present (docs/dependencies.md#the-cuda-binding), so the tag is the only thing keeping
//     CPU-only binaries alive;
//   - copy between host and device except where the caller asks for it (Upload, Download,
//     UploadIndex) or a result must reach the host (SoftmaxCrossEntropy's per-row losses and
//     hits, Sum's one float);
//   - commit or vendor NVIDIA files: headers and link stubs are fetched into a cache outside
//     the repository by scripts/cuda-env.sh.
package cuda
