//go:build cudaemu && !cuda

package cuda

/*
#cgo CXXFLAGS: -std=c++20 -O2
#cgo LDFLAGS: -lstdc++ -lpthread
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
const char *emu_kernel_name(int k);
int emu_launch(int k, int grid, const uint64_t *a);
int emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, long long sa,
	const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc, int count);

static uint64_t hs_emu_alloc(size_t bytes) { return (uint64_t)(uintptr_t)calloc(1, bytes ? bytes : 1); }
static void hs_emu_free(uint64_t p) { free((void *)(uintptr_t)p); }
static void hs_emu_memset32(uint64_t p, uint32_t v, size_t n) {
	uint32_t *q = (uint32_t *)(uintptr_t)p;
	for (size_t i = 0; i < n; i++) q[i] = v;
}
static void hs_emu_copy(uint64_t dst, uint64_t src, size_t bytes) {
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
}
static void hs_emu_htod(uint64_t dst, const void *src, size_t bytes) { memcpy((void *)(uintptr_t)dst, src, bytes); }
static void hs_emu_dtoh(void *dst, uint64_t src, size_t bytes) { memcpy(dst, (const void *)(uintptr_t)src, bytes); }
static int hs_emu_launch(int k, int grid, const uint64_t *a, int n) {
	uint64_t args[16];
	memcpy(args, a, (size_t)n * 8);
	return emu_launch(k, grid, args);
}
static int hs_emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, uint64_t a, int lda, long long sa,
		uint64_t b, int ldb, long long sb, float beta, uint64_t c, int ldc, long long sc, int count) {
	return emu_sgemm(ta, tb, m, n, k, alpha, (const float *)(uintptr_t)a, lda, sa,
		(const float *)(uintptr_t)b, ldb, sb, beta, (float *)(uintptr_t)c, ldc, sc, count);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// emulated tells tests that kernels run on the host emulator (slow: they shrink their sizes).
const emulated = true

// emuDriver runs kernels.cu on the host (emu.cpp). Device memory is C heap memory, so Go's
// collector never sees it.
type emuDriver struct{}

func openDriver(ordinal int) (driver, error) {
	if ordinal != 0 {
		return nil, fmt.Errorf("the emulator has only device 0")
	}
	for k, name := range kernelNames {
		if got := C.GoString(C.emu_kernel_name(C.int(k))); got != name {
			return nil, fmt.Errorf("emulator kernel %d is %q, driver.go says %q", k, got, name)
		}
	}
	return &emuDriver{}, nil
}

func (d *emuDriver) enter() error {
	runtime.LockOSThread()
	return nil
}

func (d *emuDriver) describe() string { return "host emulator/sm_00" }

// gridLimit is tiny: every emulated block costs 256 OS threads, and with 3 blocks the
// grid-stride loops still stride.
func (d *emuDriver) gridLimit() int { return 3 }

func (d *emuDriver) alloc(bytes int64) (devPtr, error) {
	p := C.hs_emu_alloc(C.size_t(bytes))
	if p == 0 {
		return 0, fmt.Errorf("out of host memory for %d bytes", bytes)
	}
	return devPtr(p), nil
}

func (d *emuDriver) free(p devPtr) error {
	C.hs_emu_free(C.uint64_t(p))
	return nil
}

func (d *emuDriver) memsetD32(p devPtr, v uint32, n int64) error {
	C.hs_emu_memset32(C.uint64_t(p), C.uint32_t(v), C.size_t(n))
	return nil
}

func (d *emuDriver) htod(dst devPtr, src unsafe.Pointer, bytes int64) error {
	C.hs_emu_htod(C.uint64_t(dst), src, C.size_t(bytes))
	return nil
}

func (d *emuDriver) dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error {
	C.hs_emu_dtoh(dst, C.uint64_t(src), C.size_t(bytes))
	return nil
}

func (d *emuDriver) dtod(dst, src devPtr, bytes int64) error {
	C.hs_emu_copy(C.uint64_t(dst), C.uint64_t(src), C.size_t(bytes))
	return nil
}

func (d *emuDriver) memInfo() (free, total int64, err error) { return 0, 0, nil }

func (d *emuDriver) launch(k kernelID, grid int, args []uint64) error {
	if len(args) == 0 || len(args) > 16 {
		return fmt.Errorf("emulator: %d launch arguments", len(args))
	}
	if C.hs_emu_launch(C.int(k), C.int(grid), (*C.uint64_t)(unsafe.Pointer(&args[0])), C.int(len(args))) != 0 {
		return fmt.Errorf("emulator: unknown kernel %d", k)
	}
	return nil
}

func (d *emuDriver) sgemm(g colMajorGemm, alpha float32, a devPtr, strideA int, b devPtr, strideB int, beta float32, c devPtr, strideC int, count int) error {
	st := C.hs_emu_sgemm(cbool(g.transA), cbool(g.transB), C.int(g.m), C.int(g.n), C.int(g.k), C.float(alpha),
		C.uint64_t(a), C.int(g.lda), C.longlong(strideA), C.uint64_t(b), C.int(g.ldb), C.longlong(strideB),
		C.float(beta), C.uint64_t(c), C.int(g.ldc), C.longlong(strideC), C.int(count))
	if st != 0 {
		return fmt.Errorf("emulated cublas sgemm %+v count=%d: CUBLAS_STATUS_INVALID_VALUE", g, count)
	}
	return nil
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

func (d *emuDriver) sync() error  { return nil }
func (d *emuDriver) close() error { return nil }
