// hetsync's GPU kernels (CUDA C). kernels.cu includes this file for nvcc (`make ptx`); the
// host emulator (emu.cpp, build tag cudaemu) includes it as C++. It lives in a .h file because
// Go's build cache tracks .h files of a cgo package, so editing a kernel rebuilds the emulator.
// See kernels.cu for the launch contract.

#ifndef HETSYNC_KERNELS_H
#define HETSYNC_KERNELS_H

#define HS_THREADS 256

typedef long long i64;

#define GRID_STRIDE(i, n)                                                          \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (i64)blockDim.x * gridDim.x)

// Sum over the block; the result is valid in thread 0. Called by every thread of the block.
__device__ float hs_block_sum(float v) {
    __shared__ float warp_sums[HS_THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
    if (warp == 0) {
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    __syncthreads();  // warp_sums may be reused by the next call
    return v;
}

// Broadcast of a block-wide maximum and the smallest index that attains it; ties go to the
// smaller index so the result matches a sequential first-max scan. Valid in every thread.
__device__ void hs_block_argmax(float *v, i64 *idx) {
    __shared__ float sv[HS_THREADS];
    __shared__ i64 si[HS_THREADS];
    sv[threadIdx.x] = *v;
    si[threadIdx.x] = *idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = sv[threadIdx.x + s];
            i64 oi = si[threadIdx.x + s];
            float mv = sv[threadIdx.x];
            i64 mi = si[threadIdx.x];
            if (oi >= 0 && (mi < 0 || ov > mv || (ov == mv && oi < mi))) {
                sv[threadIdx.x] = ov;
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    *v = sv[0];
    *idx = si[0];
    __syncthreads();
}

extern "C" {

// ---- elementwise ----------------------------------------------------------------------

__global__ void hs_fill(float *x, float v, i64 n) {
    GRID_STRIDE(i, n) x[i] = v;
}

// y += a*x
__global__ void hs_axpy(float *__restrict__ y, const float *__restrict__ x, float a, i64 n) {
    GRID_STRIDE(i, n) y[i] += a * x[i];
}

// x *= a
__global__ void hs_scale(float *x, float a, i64 n) {
    GRID_STRIDE(i, n) x[i] *= a;
}

// dst = a + b (dst may alias a or b)
__global__ void hs_add(float *dst, const float *a, const float *b, i64 n) {
    GRID_STRIDE(i, n) dst[i] = a[i] + b[i];
}

// dst = a * b (dst may alias a or b)
__global__ void hs_mul(float *dst, const float *a, const float *b, i64 n) {
    GRID_STRIDE(i, n) dst[i] = a[i] * b[i];
}

// ---- activations ----------------------------------------------------------------------

// y = max(x, 0) (y may be x)
__global__ void hs_relu(float *y, const float *x, i64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

// dx = y > 0 ? dy : 0 (dx may be dy)
__global__ void hs_relu_backward(float *dx, const float *dy, const float *y, i64 n) {
    GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// ---- bias -----------------------------------------------------------------------------

// x[o][c][i] += bias[c] for x of shape outer x cols x inner.
__global__ void hs_add_bias(float *x, const float *bias, i64 outer, i64 cols, i64 inner) {
    i64 n = outer * cols * inner;
    GRID_STRIDE(i, n) x[i] += bias[(i / inner) % cols];
}

// db[c] = sum over o, i of dy[o][c][i]: one block per column (grid-stride over columns),
// blockDim.x == HS_THREADS. The summation order is fixed, so results are deterministic.
__global__ void hs_sum_bias(float *db, const float *dy, i64 outer, i64 cols, i64 inner) {
    i64 m = outer * inner;
    for (i64 c = blockIdx.x; c < cols; c += gridDim.x) {
        float acc = 0.0f;
        for (i64 j = threadIdx.x; j < m; j += blockDim.x) {
            i64 o = j / inner, in = j - o * inner;
            acc += dy[(o * cols + c) * inner + in];
        }
        acc = hs_block_sum(acc);
        if (threadIdx.x == 0) db[c] = acc;
    }
}

// ---- softmax cross-entropy ------------------------------------------------------------

// One block per row (grid-stride over rows), blockDim.x == HS_THREADS. For each row r:
// rowloss[r] = log(sum_j exp(x_j - max)) + max - x[label]; rowcorrect[r] = 1 when the first
// largest logit is the label's, 0 when not, -1 when the label is outside [0, classes) (the
// host turns that into an error; the row's loss and gradient are then not written).
// dlogits (may be null) = (softmax - onehot) * inv_batch.
__global__ void hs_softmax_xent(const float *logits, const int *labels, float *dlogits,
                                float *rowloss, int *rowcorrect, i64 batch, i64 classes,
                                float inv_batch) {
    for (i64 r = blockIdx.x; r < batch; r += gridDim.x) {
        const float *x = logits + r * classes;
        i64 label = labels[r];
        if (label < 0 || label >= classes) {
            if (threadIdx.x == 0) {
                rowcorrect[r] = -1;
                rowloss[r] = 0.0f;
            }
            continue;  // uniform across the block: label is the same for every thread
        }
        float mv = 0.0f;
        i64 mi = -1;
        for (i64 j = threadIdx.x; j < classes; j += blockDim.x) {
            float v = x[j];
            if (mi < 0 || v > mv) {
                mv = v;
                mi = j;
            }
        }
        hs_block_argmax(&mv, &mi);
        float sum = 0.0f;
        for (i64 j = threadIdx.x; j < classes; j += blockDim.x) sum += expf(x[j] - mv);
        sum = hs_block_sum(sum);
        __shared__ float s_sum;
        if (threadIdx.x == 0) {
            s_sum = sum;
            rowloss[r] = logf(sum) + mv - x[label];
            rowcorrect[r] = mi == label ? 1 : 0;
        }
        __syncthreads();
        sum = s_sum;
        if (dlogits != 0) {
            float *d = dlogits + r * classes;
            float inv = 1.0f / sum;
            for (i64 j = threadIdx.x; j < classes; j += blockDim.x) {
                float p = expf(x[j] - mv) * inv;
                d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_batch;
            }
        }
        __syncthreads();  // s_sum is rewritten by the next row
    }
}

// ---- convolution helpers (NCHW) -------------------------------------------------------

// col[n][(c*kh + y)*kw + x][oh*ow_ + ow] = x[n][c][oh*stride - pad + y][ow*stride - pad + x]
// (0 outside the image). col holds batch matrices of (C*KH*KW) x (OH*OW), row-major.
__global__ void hs_im2col(float *col, const float *x, i64 batch, i64 c, i64 h, i64 w, i64 kh,
                          i64 kw, i64 pad, i64 stride, i64 oh, i64 ow) {
    i64 ohw = oh * ow, rows = c * kh * kw;
    i64 n = batch * rows * ohw;
    GRID_STRIDE(i, n) {
        i64 p = i % ohw, t = i / ohw;
        i64 row = t % rows, b = t / rows;
        i64 kx = row % kw, ky = (row / kw) % kh, ch = row / (kw * kh);
        i64 iy = (p / ow) * stride - pad + ky, ix = (p % ow) * stride - pad + kx;
        float v = 0.0f;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[((b * c + ch) * h + iy) * w + ix];
        col[i] = v;
    }
}

// The adjoint of hs_im2col, as a gather: every dx element sums the col entries that copied it,
// so no atomics are needed and the result is deterministic. dx is overwritten.
__global__ void hs_col2im(float *dx, const float *col, i64 batch, i64 c, i64 h, i64 w, i64 kh,
                          i64 kw, i64 pad, i64 stride, i64 oh, i64 ow) {
    i64 ohw = oh * ow, rows = c * kh * kw;
    i64 n = batch * c * h * w;
    GRID_STRIDE(i, n) {
        i64 ix = i % w, iy = (i / w) % h, ch = (i / (w * h)) % c, b = i / (w * h * c);
        const float *cb = col + b * rows * ohw;
        float acc = 0.0f;
        for (i64 ky = 0; ky < kh; ky++) {
            i64 ty = iy + pad - ky;
            if (ty < 0 || ty % stride != 0) continue;
            i64 y = ty / stride;
            if (y >= oh) continue;
            for (i64 kx = 0; kx < kw; kx++) {
                i64 tx = ix + pad - kx;
                if (tx < 0 || tx % stride != 0) continue;
                i64 x = tx / stride;
                if (x >= ow) continue;
                acc += cb[((ch * kh + ky) * kw + kx) * ohw + y * ow + x];
            }
        }
        dx[i] = acc;
    }
}

// ---- 2x2 max pooling, stride 2 --------------------------------------------------------

// y[plane][oy][ox] = max of the 2x2 window; argmax records the winner's flat index into x
// (as the CPU backend does; the host keeps x below 2^31 elements). The first maximum in
// row-major window order wins ties, as in PyTorch. planes = batch*c.
__global__ void hs_maxpool2(float *y, int *argmax, const float *x, i64 planes, i64 h, i64 w) {
    i64 oh = h / 2, ow = w / 2;
    i64 n = planes * oh * ow;
    GRID_STRIDE(i, n) {
        i64 ox = i % ow, oy = (i / ow) % oh, pl = i / (ow * oh);
        i64 r0 = pl * h * w + (2 * oy) * w + 2 * ox, r1 = r0 + w;
        i64 best = r0;
        float bv = x[r0];
        float v = x[r0 + 1];
        if (v > bv) { bv = v; best = r0 + 1; }
        v = x[r1];
        if (v > bv) { bv = v; best = r1; }
        v = x[r1 + 1];
        if (v > bv) { bv = v; best = r1 + 1; }
        y[i] = bv;
        argmax[i] = (int)best;
    }
}

// dx[i] = dy[o] if output o (the window holding input i) chose i, else 0. Every input belongs
// to exactly one window, so this gather overwrites all of dx without atomics.
__global__ void hs_maxpool2_backward(float *dx, const float *dy, const int *argmax, i64 planes,
                                     i64 h, i64 w) {
    i64 oh = h / 2, ow = w / 2;
    i64 n = planes * h * w;
    GRID_STRIDE(i, n) {
        i64 ix = i % w, iy = (i / w) % h, pl = i / (h * w);
        i64 o = (pl * oh + iy / 2) * ow + ix / 2;
        dx[i] = argmax[o] == (int)i ? dy[o] : 0.0f;
    }
}

// ---- optimizer ------------------------------------------------------------------------

// PyTorch SGD without momentum: p -= lr * (g + wd*p)
__global__ void hs_sgd(float *p, const float *g, float lr, float wd, i64 n) {
    GRID_STRIDE(i, n) {
        float gi = g[i] + wd * p[i];
        p[i] -= lr * gi;
    }
}

// PyTorch SGD with momentum (no dampening, no Nesterov):
// g' = g + wd*p; v = mom*v + g'; p -= lr*v
__global__ void hs_sgd_momentum(float *p, const float *g, float *v, float lr, float mom,
                                float wd, i64 n) {
    GRID_STRIDE(i, n) {
        float gi = g[i] + wd * p[i];
        float vi = mom * v[i] + gi;
        v[i] = vi;
        p[i] -= lr * vi;
    }
}

// ---- reduction ------------------------------------------------------------------------

// out[blockIdx.x] = sum of this block's grid-stride share of x; blockDim.x == HS_THREADS.
// Launched twice for a full sum: n -> gridDim.x partials, then one block over the partials.
__global__ void hs_sum(float *out, const float *x, i64 n) {
    float acc = 0.0f;
    GRID_STRIDE(i, n) acc += x[i];
    acc = hs_block_sum(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

}  // extern "C"

#endif  // HETSYNC_KERNELS_H
