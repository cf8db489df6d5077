//go:build cudaemu && !cuda

// A CPU emulator for kernels.cu, for tests on machines without a GPU (build tag cudaemu).
// It compiles the very same CUDA C source as host C++. A block's HS_THREADS threads are fibers
// (ucontext) on the calling OS thread, run round-robin: __syncthreads parks a fiber until every
// live thread of the block is parked there, __shfl_down_sync exchanges values through a
// per-warp barrier, and a barrier that can never be released (divergent __syncthreads) aborts
// with a message instead of hanging. Blocks run one after another, so __shared__ variables can
// be function statics. SGEMM follows the BLAS definition with cuBLAS's argument checks. It is
// slow, single-threaded and deterministic, and meant only to check that the kernels and the Go
// code that launches them compute what the CPU backend computes.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include <math.h>
#include <ucontext.h>

namespace emu {
struct uint3 {
    unsigned x, y, z;
};
}  // namespace emu

static emu::uint3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
enum Wait { none, block, warp };

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    Wait wait;
    bool done;
};

static ucontext_t scheduler;
static Fiber *fibers;  // HS_THREADS of them, made once
static Fiber *current;
static const std::function<void()> *body;
static float shfl[256];

static void park(Wait w) {
    current->wait = w;
    swapcontext(&current->ctx, &scheduler);
}

static void trampoline() {
    (*body)();
    current->done = true;
    swapcontext(&current->ctx, &scheduler);
}

static void deadlock(unsigned b) {
    fprintf(stderr, "cuda emulator: block %u: threads wait at barriers that can never be released "
                    "(a __syncthreads or __shfl_down_sync not reached by every thread)\n", b);
    abort();
}
}  // namespace emu

#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict

static inline void __syncthreads() { emu::park(emu::block); }

static inline float __shfl_down_sync(unsigned, float v, int off) {
    unsigned t = threadIdx.x, lane = t & 31;
    emu::shfl[t] = v;
    emu::park(emu::warp);
    float r = (lane + off < 32 && t + off < blockDim.x) ? emu::shfl[t + off] : v;
    emu::park(emu::warp);
    return r;
}

#include "kernels.h"

static_assert(HS_THREADS == 256, "emulator sized for 256 threads per block");

// run_block runs every thread of block b to completion, releasing barriers as they fill.
static void run_block(unsigned b) {
    using namespace emu;
    const size_t stack_bytes = 64 << 10;
    for (unsigned t = 0; t < HS_THREADS; t++) {
        Fiber &f = fibers[t];
        if (f.stack.empty()) f.stack.resize(stack_bytes);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, trampoline, 0);
        f.wait = none;
        f.done = false;
    }
    blockIdx = {b, 0, 0};
    for (;;) {
        bool ran = false, all_done = true;
        for (unsigned t = 0; t < HS_THREADS; t++) {
            Fiber &f = fibers[t];
            if (f.done) continue;
            all_done = false;
            if (f.wait != none) continue;
            current = &f;
            threadIdx = {t, 0, 0};
            swapcontext(&scheduler, &f.ctx);
            ran = true;
        }
        if (all_done) return;
        if (ran) continue;
        // Nobody can run: release the block barrier if every live thread waits there, else
        // every warp barrier whose 32 threads all wait there.
        bool block_full = true, released = false;
        for (unsigned t = 0; t < HS_THREADS; t++)
            if (!fibers[t].done && fibers[t].wait != block) block_full = false;
        if (block_full) {
            for (unsigned t = 0; t < HS_THREADS; t++) fibers[t].wait = none;
            continue;
        }
        for (unsigned w = 0; w < HS_THREADS / 32; w++) {
            bool full = true;
            for (unsigned t = w * 32; t < w * 32 + 32; t++)
                if (fibers[t].done || fibers[t].wait != warp) full = false;
            if (full) {
                for (unsigned t = w * 32; t < w * 32 + 32; t++) fibers[t].wait = none;
                released = true;
            }
        }
        if (!released) deadlock(b);
    }
}

static void run_grid(int grid, const std::function<void()> &fn) {
    static std::mutex launching;  // one emulated GPU: launches run one at a time
    std::lock_guard<std::mutex> lock(launching);
    static emu::Fiber *pool = new emu::Fiber[HS_THREADS];  // stacks reused by every launch
    emu::fibers = pool;
    emu::body = &fn;
    blockDim = {HS_THREADS, 1, 1};
    gridDim = {(unsigned)grid, 1, 1};
    for (unsigned b = 0; b < (unsigned)grid; b++) run_block(b);
}

static float F(uint64_t v) {
    uint32_t bits = (uint32_t)v;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
#define P(i) ((float *)(uintptr_t)a[i])
#define CP(i) ((const float *)(uintptr_t)a[i])
#define I(i) ((i64)a[i])

extern "C" {

// The names, in kernelID order (driver.go); the Go side checks them.
const char *emu_kernel_name(int k) {
    static const char *names[] = {
        "hs_fill", "hs_axpy", "hs_scale", "hs_add", "hs_mul", "hs_relu", "hs_relu_backward",
        "hs_add_bias", "hs_sum_bias", "hs_softmax_xent", "hs_im2col", "hs_col2im", "hs_maxpool2",
        "hs_maxpool2_backward", "hs_sgd", "hs_sgd_momentum", "hs_sum",
    };
    return k >= 0 && k < (int)(sizeof names / sizeof names[0]) ? names[k] : "";
}

// emu_launch runs kernel k; it returns 0, or 1 for an unknown kernel.
int emu_launch(int k, int grid, const uint64_t *a) {
    std::function<void()> body;
    switch (k) {
    case 0: body = [a] { hs_fill(P(0), F(a[1]), I(2)); }; break;
    case 1: body = [a] { hs_axpy(P(0), CP(1), F(a[2]), I(3)); }; break;
    case 2: body = [a] { hs_scale(P(0), F(a[1]), I(2)); }; break;
    case 3: body = [a] { hs_add(P(0), CP(1), CP(2), I(3)); }; break;
    case 4: body = [a] { hs_mul(P(0), CP(1), CP(2), I(3)); }; break;
    case 5: body = [a] { hs_relu(P(0), CP(1), I(2)); }; break;
    case 6: body = [a] { hs_relu_backward(P(0), CP(1), CP(2), I(3)); }; break;
    case 7: body = [a] { hs_add_bias(P(0), CP(1), I(2), I(3), I(4)); }; break;
    case 8: body = [a] { hs_sum_bias(P(0), CP(1), I(2), I(3), I(4)); }; break;
    case 9:
        body = [a] {
            hs_softmax_xent(CP(0), (const int *)(uintptr_t)a[1], P(2), P(3), (int *)(uintptr_t)a[4],
                            I(5), I(6), F(a[7]));
        };
        break;
    case 10: body = [a] { hs_im2col(P(0), CP(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11)); }; break;
    case 11: body = [a] { hs_col2im(P(0), CP(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9), I(10), I(11)); }; break;
    case 12: body = [a] { hs_maxpool2(P(0), (int *)(uintptr_t)a[1], CP(2), I(3), I(4), I(5)); }; break;
    case 13: body = [a] { hs_maxpool2_backward(P(0), CP(1), (const int *)(uintptr_t)a[2], I(3), I(4), I(5)); }; break;
    case 14: body = [a] { hs_sgd(P(0), CP(1), F(a[2]), F(a[3]), I(4)); }; break;
    case 15: body = [a] { hs_sgd_momentum(P(0), CP(1), P(2), F(a[3]), F(a[4]), F(a[5]), I(6)); }; break;
    case 16: body = [a] { hs_sum(P(0), CP(1), I(2)); }; break;
    default: return 1;
    }
    run_grid(grid, body);
    return 0;
}

// emu_sgemm is cuBLAS's cublasSgemmStridedBatched by definition (column-major). It returns 0,
// or 7 (CUBLAS_STATUS_INVALID_VALUE) where cuBLAS would reject the arguments.
int emu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, long long sa,
              const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc, int count) {
    int rowsA = ta ? k : m, rowsB = tb ? n : k;
    if (m < 0 || n < 0 || k < 0 || count < 0 || lda < (rowsA > 1 ? rowsA : 1) ||
        ldb < (rowsB > 1 ? rowsB : 1) || ldc < (m > 1 ? m : 1))
        return 7;
    for (int q = 0; q < count; q++) {
        const float *a = A + q * sa, *b = B + q * sb;
        float *c = C + q * sc;
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                float acc = 0;
                for (int p = 0; p < k; p++) {
                    float av = ta ? a[p + (long long)i * lda] : a[i + (long long)p * lda];
                    float bv = tb ? b[j + (long long)p * ldb] : b[p + (long long)j * ldb];
                    acc += av * bv;
                }
                float *cij = c + i + (long long)j * ldc;
                *cij = beta == 0 ? alpha * acc : alpha * acc + beta * *cij;
            }
        }
    }
    return 0;
}

}  // extern "C"
