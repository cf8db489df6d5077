//go:build !amd64 || purego

package kernels

func haveAVX2FMA() bool { return false }

func haveAVX512() bool { return false }

// The assembly kernels are never selected without the assembly; these names exist so the
// device code compiles the same everywhere.
var (
	gemmKernelAVX2   = gemmKernelGo
	gemmKernelAVX512 = gemmKernelGo
)
