// CUDA C sources of hetsync's GPU kernels (the code is in kernels.h). Compiled to kernels.ptx
// by `make ptx` (nvcc -ptx -arch=compute_52); the .ptx is committed and embedded, so neither a build nor a
// run needs nvcc. Every kernel is extern "C" (stable names for cuModuleGetFunction), works on
// float32, takes 64-bit sizes, and uses grid-stride loops so any grid size is correct.
//
// Launch contract (see Device.launch): every scalar parameter is 8 bytes on the Go side; float
// parameters are read from the low 4 bytes, which is what gorgonia.org/cu's Launch passes.
// Block-reduction kernels assume blockDim.x == HS_THREADS.

#include "kernels.h"
