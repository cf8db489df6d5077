#!/usr/bin/env bash
# Builds, on this machine, what scripts/gpu-check.sh needs on a GPU machine that has no Go
# toolchain and no network (a borrowed accelerator): stripped and xz-compressed bin/hetsync,
# bin/hetsync-cuda and the Python package's library, the kernels/cuda test binary, a shim
# that lets a binary linked against libcublas.so.11 run on a newer cuBLAS (the five calls
# kernels/cuda makes), and Fashion-MNIST's test split (also standing in for the training
# split). Everything lands in .dev/carry (ignored by git via .git/info/exclude), about 37 MB.
#
#   scripts/gpu-bundle.sh && <run on the GPU machine, with .dev/carry>: bash .dev/carry/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo /.dev/ >> .git/info/exclude
out=.dev/carry tmp=.dev/build
rm -rf "$out" "$tmp" && mkdir -p "$out/shim" "$out/data" "$tmp"
go build -ldflags="-s -w" -o "$tmp/hetsync" ./cmd/hetsync
go build -buildmode=c-shared -ldflags="-s -w" -o "$tmp/libhetsync.so" ./capi
scripts/cuda-env.sh run go build -tags cuda -ldflags="-s -w" -o "$tmp/hetsync-cuda" ./cmd/hetsync
scripts/cuda-env.sh run go test -c -tags cuda -ldflags="-s -w" -o "$out/cuda.test" ./kernels/cuda/
for f in hetsync libhetsync.so hetsync-cuda; do xz -T0 -6 -c "$tmp/$f" > "$out/$f.xz"; done
gcc -O2 -shared -fPIC -o "$out/shim/libcublas.so.11" scripts/gpu-cublas-shim.c \
  -Wl,--version-script=<(echo 'libcublas.so.11 { global: cublas*; local: *; };') -Wl,-soname,libcublas.so.11 -ldl
d=${HETSYNC_DATA:-/usr/share/datasets/fashion-mnist}
cp "$d"/t10k-* "$out/data/"
(cd "$out/data" && ln -sf t10k-images-idx3-ubyte.gz train-images-idx3-ubyte.gz && ln -sf t10k-labels-idx1-ubyte.gz train-labels-idx1-ubyte.gz)
cp scripts/gpu-check.sh "$out/"
rm -rf "$tmp"
du -sh "$out"
