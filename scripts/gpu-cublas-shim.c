/* A stand-in libcublas.so.11 for scripts/gpu-check.sh: forwards the five cuBLAS calls that
   kernels/cuda makes, linked against libcublas.so.11's symbol version, to the machine's newer
   cuBLAS (CUDA 12 and 13 ship libcublas.so.12 and .13). Built by scripts/gpu-bundle.sh. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static void *lib;
static void *sym(const char *n) {
  if (!lib) {
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", 0};
    for (int i = 0; names[i] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "shim: no libcublas: %s\n", dlerror()); abort(); }
  }
  void *f = dlsym(lib, n);
  if (!f) { fprintf(stderr, "shim: %s missing: %s\n", n, dlerror()); abort(); }
  return f;
}
typedef void *H;
int cublasCreate_v2(H *h) { return ((int (*)(H *))sym("cublasCreate_v2"))(h); }
int cublasDestroy_v2(H h) { return ((int (*)(H))sym("cublasDestroy_v2"))(h); }
int cublasSetMathMode(H h, int m) { return ((int (*)(H, int))sym("cublasSetMathMode"))(h, m); }
int cublasSgemm_v2(H h, int ta, int tb, int m, int n, int k, const float *al, const float *a, int lda,
                   const float *b, int ldb, const float *be, float *c, int ldc) {
  return ((int (*)(H, int, int, int, int, int, const float *, const float *, int, const float *, int,
                   const float *, float *, int))sym("cublasSgemm_v2"))(h, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
int cublasSgemmStridedBatched(H h, int ta, int tb, int m, int n, int k, const float *al, const float *a,
                              int lda, long long sa, const float *b, int ldb, long long sb, const float *be,
                              float *c, int ldc, long long sc, int cnt) {
  return ((int (*)(H, int, int, int, int, int, const float *, const float *, int, long long, const float *, int,
                   long long, const float *, float *, int, long long, int))sym("cublasSgemmStridedBatched"))(
      h, ta, tb, m, n, k, al, a, lda, sa, b, ldb, sb, be, c, ldc, sc, cnt);
}
