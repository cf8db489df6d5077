//go:build amd64 && !purego

package kernels

// cpuidex executes CPUID with EAX=leaf, ECX=sub.
//
//go:noescape
func cpuidex(leaf, sub uint32) (a, b, c, d uint32)

// xgetbv0 returns XCR0, the register state the OS saves on context switches.
func xgetbv0() uint32

// sgemmKernel6x16AVX2 is the AVX2/FMA micro-kernel; see microKernel.
//
//go:noescape
func sgemmKernel6x16AVX2(kc int, a, b, c *float32, ldc int, load bool)

func haveAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuidex(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, c1, _ := cpuidex(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if c1&fma == 0 || c1&osxsave == 0 || c1&avx == 0 {
		return false
	}
	if xgetbv0()&6 != 6 { // XMM and YMM state enabled by the OS
		return false
	}
	_, b7, _, _ := cpuidex(7, 0)
	return b7&(1<<5) != 0
}

// sgemmKernel8x32AVX512 is the AVX-512 micro-kernel; see microKernel.
//
//go:noescape
func sgemmKernel8x32AVX512(kc int, a, b, c *float32, ldc int, load bool)

func haveAVX512() bool {
	if !haveAVX2FMA() {
		return false
	}
	if xgetbv0()&0xe6 != 0xe6 { // XMM, YMM, opmask and both ZMM halves enabled by the OS
		return false
	}
	_, b7, _, _ := cpuidex(7, 0)
	return b7&(1<<16) != 0 // AVX512F
}

// gatherColumns16AVX512 sets dst[kk·width+i] = src[kk+idx[i]] for kk < kc, i < 16.
//
//go:noescape
func gatherColumns16AVX512(dst, src *float32, idx *int32, kc, width int)

var (
	gemmKernelAVX2   = microKernel{mr: 6, nr: 16, fn: sgemmAVX2}
	gemmKernelAVX512 = microKernel{mr: 8, nr: 32, fn: sgemmAVX512, gather: gatherColumns16}
)

// gatherColumns16 packs sixteen rows of src (row i starts at off+i·ld) k-major into pan:
// pan[kk·width+i] = src[off+i·ld+kk] for kk < kc. The caller checks that 15·ld fits an int32.
func gatherColumns16(pan, src []float32, off, ld, kc, width int) {
	if kc == 0 {
		return
	}
	_ = pan[(kc-1)*width+15]
	_ = src[off+15*ld+kc-1]
	var idx [16]int32
	for i := range idx {
		idx[i] = int32(i * ld)
	}
	gatherColumns16AVX512(&pan[0], &src[off], &idx[0], kc, width)
}

func sgemmAVX2(kc int, a, b, c []float32, ldc int, load bool) {
	if kc == 0 {
		return
	}
	// Bounds the assembly relies on.
	_ = a[kc*6-1]
	_ = b[kc*16-1]
	_ = c[5*ldc+15]
	sgemmKernel6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, load)
}

func sgemmAVX512(kc int, a, b, c []float32, ldc int, load bool) {
	if kc == 0 {
		return
	}
	_ = a[kc*8-1]
	_ = b[kc*32-1]
	_ = c[7*ldc+31]
	sgemmKernel8x32AVX512(kc, &a[0], &b[0], &c[0], ldc, load)
}
