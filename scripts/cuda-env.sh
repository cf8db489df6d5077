#!/usr/bin/env bash
# Builds the CUDA side of hetsync on a machine WITHOUT the CUDA toolkit.
#
# It fetches Debian's non-free CUDA 11.8 packages through a private apt configuration (its own
# source list, package lists and archive cache under the cache directory, so the system's apt
# sources and state stay untouched), and extracts only what the build needs:
#
#   dev      nvidia-cuda-dev (~774 MB download): headers (usr/include) and the link stubs
#            libcuda.so, libcublas.so, libcublasLt.so. Enough for `go build -tags cuda`.
#   toolkit  nvidia-cuda-toolkit (~84 MB): nvcc, cicc, ptxas, libdevice, made relocatable.
#            Needed only to regenerate (`make ptx`) or check (`make cuda-check`) the PTX.
#
# Nothing NVIDIA ships is ever written inside the repository. The cache is
#   $HETSYNC_CUDA_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/hetsync/cuda
# and every step leaves a stamp there, so re-runs return at once.
#
# Usage:
#   scripts/cuda-env.sh dev        fetch + extract headers and stubs (idempotent)
#   scripts/cuda-env.sh toolkit    fetch + extract nvcc/ptxas (idempotent; implies dev)
#   scripts/cuda-env.sh runtime    fetch + extract libcublas.so.11 and libcublasLt.so.11 (~250 MB
#                                  download), for GPU machines that have a driver but no CUDA 11
#                                  cuBLAS; `env` then also exports LD_LIBRARY_PATH
#   scripts/cuda-env.sh env        print `export` lines for cgo: eval "$(scripts/cuda-env.sh env)"
#   scripts/cuda-env.sh run CMD... run CMD with that environment (for make recipes)
#   scripts/cuda-env.sh nvcc       print the path of the extracted nvcc   (implies toolkit)
#   scripts/cuda-env.sh ptxas      print the path of the extracted ptxas  (implies toolkit)
#   scripts/cuda-env.sh dir        print the cache directory
#   scripts/cuda-env.sh clean      remove the cache directory
#
# Environment: HETSYNC_CUDA_HOME (use an installed CUDA ≤ 12 toolkit there, e.g. /usr/local/cuda,
# instead of fetching: its include/ and lib64/ are used as they are; CUDA 13 headers break
# gorgonia.org/cu), HETSYNC_CUDA_CACHE (cache dir), HETSYNC_DEBIAN_MIRROR (default
# http://deb.debian.org/debian), HETSYNC_DEBIAN_SUITE (default bookworm),
# HETSYNC_CUDA_KEEP_DEBS=1 (keep the downloaded .deb files after extraction).
set -euo pipefail

cache="${HETSYNC_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hetsync/cuda}"
mirror="${HETSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite="${HETSYNC_DEBIAN_SUITE:-bookworm}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
aptdir="$cache/apt"
root="$cache/root"         # headers and stubs: $root/usr/include, $root/usr/lib/x86_64-linux-gnu/stubs
tkroot="$cache/toolkit"    # nvcc tree: $tkroot/usr/lib/nvidia-cuda-toolkit/bin/{nvcc,ptxas,...}
stubs="$root/usr/lib/x86_64-linux-gnu/stubs"
tkbin="$tkroot/usr/lib/nvidia-cuda-toolkit/bin"   # nvcc, cicc
tkubin="$tkroot/usr/bin"                           # ptxas, cudafe++, fatbinary, nvlink
rtroot="$cache/runtime"    # libcublas.so.11 and libcublasLt.so.11: $rtroot/lib

say() { echo "cuda-env: $*" >&2; }
die() { say "error: $*"; exit 1; }

need_tools() {
  local t
  for t in apt-get dpkg-deb tar; do
    command -v "$t" >/dev/null || die "'$t' not found; this script needs a Debian-like system (apt, dpkg)"
  done
  [ -r "$keyring" ] || die "$keyring missing (install debian-archive-keyring); needed to verify the non-free index"
  [ "$(dpkg --print-architecture 2>/dev/null || echo unknown)" = amd64 ] ||
    die "only amd64 is supported (the stubs live in usr/lib/x86_64-linux-gnu)"
}

# apt with a private configuration: only this script's source list, lists and archive cache.
papt() {
  apt-get -q \
    -o Dir::Etc::SourceList="$aptdir/sources.list" \
    -o Dir::Etc::SourceParts="$aptdir/sources.list.d" \
    -o Dir::State::Lists="$aptdir/lists" \
    -o Dir::Cache="$aptdir/cache" \
    -o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" \
    -o APT::Sandbox::User=root \
    "$@"
}

apt_update() {
  [ -f "$aptdir/updated.stamp" ] && return 0
  need_tools
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial" "$aptdir/sources.list.d"
  echo "deb [signed-by=$keyring] $mirror $suite non-free" >"$aptdir/sources.list"
  say "apt-get update (private source list: $mirror $suite non-free)"
  papt update >/dev/null || die "apt-get update failed for $mirror $suite non-free (network? mirror?)"
  touch "$aptdir/updated.stamp"
}

# download PKG into $cache/debs and echo the .deb path
download() {
  local pkg="$1" deb
  mkdir -p "$cache/debs"
  deb=$(ls "$cache/debs/${pkg}"_*.deb 2>/dev/null | head -n1 || true)
  if [ -z "$deb" ]; then
    apt_update
    say "downloading $pkg (large; once)"
    (cd "$cache/debs" && papt download "$pkg" >/dev/null) || die "apt-get download $pkg failed"
    deb=$(ls "$cache/debs/${pkg}"_*.deb | head -n1)
  fi
  echo "$deb"
}

drop_deb() {
  [ "${HETSYNC_CUDA_KEEP_DEBS:-0}" = 1 ] || rm -f "$1"
}

fetch_dev() {
  [ -f "$cache/dev.stamp" ] && return 0
  local deb t0=$SECONDS
  deb=$(download nvidia-cuda-dev)
  say "extracting headers and link stubs from $(basename "$deb")"
  rm -rf "$root.tmp" && mkdir -p "$root.tmp"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$root.tmp" --wildcards \
    './usr/include/*' \
    './usr/lib/x86_64-linux-gnu/stubs/libcuda.so' \
    './usr/lib/x86_64-linux-gnu/stubs/libcublas.so' \
    './usr/lib/x86_64-linux-gnu/stubs/libcublasLt.so' || die "extracting $deb failed"
  [ -f "$root.tmp/usr/include/cuda.h" ] && [ -f "$root.tmp/usr/include/cublas_v2.h" ] ||
    die "$deb did not contain cuda.h / cublas_v2.h"
  rm -rf "$root" && mv "$root.tmp" "$root"
  dpkg-deb -f "$deb" Version >"$cache/dev.version"
  drop_deb "$deb"
  touch "$cache/dev.stamp"
  say "dev ready in $((SECONDS - t0)) s: $root ($(du -sh "$root" | cut -f1))"
}

fetch_toolkit() {
  fetch_dev
  [ -f "$cache/toolkit.stamp" ] && return 0
  local deb t0=$SECONDS
  deb=$(download nvidia-cuda-toolkit)
  say "extracting nvcc/ptxas from $(basename "$deb")"
  rm -rf "$tkroot.tmp" && mkdir -p "$tkroot.tmp"
  dpkg-deb -x "$deb" "$tkroot.tmp" || die "extracting $deb failed"
  local bin="$tkroot.tmp/usr/lib/nvidia-cuda-toolkit/bin"
  [ -x "$bin/nvcc" ] && [ -x "$bin/cicc" ] && [ -x "$tkroot.tmp/usr/bin/ptxas" ] || die "$deb did not contain nvcc and ptxas in the expected place"
  # Debian's nvcc.profile is a symlink to /etc/nvcc.profile; replace it with one that finds the
  # extracted tools (_HERE_ is nvcc's own directory; ptxas and friends are in ../../../bin) and
  # the extracted headers.
  rm -f "$bin/nvcc.profile"
  cat >"$bin/nvcc.profile" <<EOF
NVVMIR_LIBRARY_DIR = \$(_HERE_)/../libdevice
PATH += \$(_HERE_):\$(_HERE_)/../../../bin:
INCLUDES += "-I$root/usr/include" \$(_SPACE_)
EOF
  rm -rf "$tkroot" && mv "$tkroot.tmp" "$tkroot"
  dpkg-deb -f "$deb" Version >"$cache/toolkit.version"
  drop_deb "$deb"
  touch "$cache/toolkit.stamp"
  say "toolkit ready in $((SECONDS - t0)) s: $tkbin"
}

fetch_runtime() {
  [ -f "$cache/runtime.stamp" ] && return 0
  local pkg deb t0=$SECONDS
  rm -rf "$rtroot.tmp" && mkdir -p "$rtroot.tmp/lib"
  for pkg in libcublas11 libcublaslt11; do
    deb=$(download "$pkg")
    say "extracting $(basename "$deb")"
    mkdir -p "$rtroot.tmp/x"
    dpkg-deb -x "$deb" "$rtroot.tmp/x" || die "extracting $deb failed"
    find "$rtroot.tmp/x" -name 'libcublas*.so.11*' -exec cp -a {} "$rtroot.tmp/lib/" \;
    rm -rf "$rtroot.tmp/x"
    drop_deb "$deb"
  done
  [ -e "$rtroot.tmp/lib/libcublas.so.11" ] && [ -e "$rtroot.tmp/lib/libcublasLt.so.11" ] ||
    die "libcublas.so.11 / libcublasLt.so.11 not found in the Debian packages"
  rm -rf "$rtroot" && mv "$rtroot.tmp" "$rtroot"
  touch "$cache/runtime.stamp"
  say "runtime ready in $((SECONDS - t0)) s: $rtroot/lib ($(du -sh "$rtroot" | cut -f1))"
}

print_env() {
  echo "export CGO_ENABLED=1"
  if [ -n "${HETSYNC_CUDA_HOME:-}" ]; then
    [ -f "$HETSYNC_CUDA_HOME/include/cuda.h" ] || die "HETSYNC_CUDA_HOME=$HETSYNC_CUDA_HOME has no include/cuda.h"
    echo "export CGO_CFLAGS=\"-I$HETSYNC_CUDA_HOME/include\""
    echo "export CGO_LDFLAGS=\"-L$HETSYNC_CUDA_HOME/lib64 -L$HETSYNC_CUDA_HOME/lib64/stubs\""
    return
  fi
  fetch_dev
  echo "export CGO_CFLAGS=\"-I$root/usr/include\""
  echo "export CGO_LDFLAGS=\"-L$stubs\""
  if [ -f "$cache/runtime.stamp" ]; then
    echo "export LD_LIBRARY_PATH=\"$rtroot/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  fi
}

cmd="${1:-env}"
case "$cmd" in
dev) fetch_dev ;;
toolkit) fetch_toolkit ;;
runtime) fetch_runtime ;;
env) print_env ;;
run)
  shift
  [ $# -gt 0 ] || die "usage: $0 run COMMAND [ARGS...]"
  envs="$(print_env)" || exit 1
  eval "$envs"
  exec "$@"
  ;;
nvcc) fetch_toolkit && echo "$tkbin/nvcc" ;;
ptxas) fetch_toolkit && echo "$tkubin/ptxas" ;;
dir) echo "$cache" ;;
clean) rm -rf "$cache" && say "removed $cache" ;;
*) die "unknown command '$cmd' (want: dev, toolkit, runtime, env, run, nvcc, ptxas, dir, clean)" ;;
esac
