// Package kernels is hetsync's numeric layer: a Device that owns tensors and runs the ops a
// training step needs (GEMM, bias, elementwise, ReLU, softmax cross-entropy, convolution,
// max-pooling, the SGD update), and the CPU backend that implements it.
//
// The Device interface makes no CPU assumptions, so that a CUDA backend (behind the cuda build
// tag) can implement it: tensors are opaque handles, host↔device copies are explicit (Upload,
// Download), ops do not return errors but record the first one, which Sync reports, like a
// CUDA stream. HostView is the one door to host memory, and it opens only for tensors that
// already live there.
//
// The CPU backend (NewCPU, NewCPUWith) multiplies with one of four GEMM engines, all held to
// the same tests (GEMMEngines lists those this build and CPU have; "auto" takes the first):
//
//   - "openblas": cblas_sgemm from the system's OpenBLAS through cgo. Only in builds with
//     `-tags openblas` (needs cgo and Debian's libopenblas-dev). OpenBLAS's thread count is
//     process-wide; NewCPU sets it to the device's thread count.
//   - "avx512": a packed, blocked GEMM (Goto/BLIS structure, gemm.go) with an 8×32 AVX-512
//     micro-kernel in Go assembly; on amd64 CPUs with AVX-512F, unless the purego tag is set.
//   - "avx2": the same with a 6×16 AVX2/FMA micro-kernel, for amd64 CPUs without AVX-512.
//   - "go": the same packed GEMM with a portable micro-kernel; builds everywhere.
//
// The default build needs no cgo and no tag. With the packed engines, convolutions never write
// the im2col matrix: the GEMM packs its panels straight from a zero-padded copy of the input
// sample (convB, convGeom).
//
// On amd64 the SGD update and ReLU with its derivative run in SSE (sgd_amd64.s,
// relu_amd64.s) and the AVX-512 engine packs transposed operands with gather instructions;
// the vector loops do the Go loops' operations in the same order, without fused multiply-adds,
// so results do not depend on which path ran.
//
// Threads (CPUConfig.Threads) bound how many goroutines one op uses; give each rank on a host
// its share of the cores. With the same thread count, every op is deterministic: the same
// inputs give bitwise-equal outputs, run after run.
//
// Reductions for the collectives (add, scale, cast over byte buffers) live in reduce.go and
// are written by the collective's owners; they do not go through a Device.
//
// This package must never import anything above it (collective, trainer), keep global mutable
// state (beyond OpenBLAS's own thread setting), allocate per call in steady state, or panic on
// bad input: shapes and lengths that do not fit are errors.
package kernels
