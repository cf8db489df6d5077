#!/usr/bin/env bash
# Generates and checks the PTX that kernels/cuda embeds, with the nvcc/ptxas that
# scripts/cuda-env.sh extracts from Debian (no CUDA toolkit installed, no GPU needed).
#
#   scripts/cuda-ptx.sh gen     kernels/cuda/kernels.cu (+ kernels.h) -> kernels/cuda/kernels.ptx
#                               (make ptx)
#   scripts/cuda-ptx.sh check   assemble kernels.ptx with ptxas for every arch in
#                               $HETSYNC_PTX_ARCHS (default "sm_52 sm_70 sm_90"); fail on any
#                               error, warning or register spill; also fail when kernels.ptx
#                               is not what nvcc makes from kernels.cu + kernels.h now, or its
#                               .version is above 7.8
#
# The PTX targets compute_52 at ISA 7.8 (CUDA 11.8), so any driver >= 520 JIT-compiles it for
# Maxwell through Hopper.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="$here/kernels/cuda/kernels.cu"
ptx="$here/kernels/cuda/kernels.ptx"
envsh="$here/scripts/cuda-env.sh"

say() { echo "cuda-ptx: $*" >&2; }
die() { say "error: $*"; exit 1; }

# compile SRC to PTX file OUT
compile() {
  local nvcc
  nvcc="$("$envsh" nvcc)"
  command -v gcc >/dev/null || die "gcc not found (nvcc needs a host compiler)"
  # gcc 12 is newer than CUDA 11.8 officially supports; host code is never compiled here
  # (-ptx), so the check is waived.
  "$nvcc" -ptx -arch=compute_52 -ccbin "$(command -v gcc)" -allow-unsupported-compiler \
    -o "$2" "$1" || die "nvcc failed on $1"
}

gen() {
  local tmp
  tmp="$(mktemp "$ptx.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  compile "$src" "$tmp"
  chmod 644 "$tmp"
  mv "$tmp" "$ptx"
  trap - EXIT
  say "wrote $ptx ($(grep -c '^.visible .entry' "$ptx") kernels)"
}

check() {
  local ptxas arch out ver
  [ -f "$ptx" ] || die "$ptx missing; run 'make ptx'"
  # Fresh means: what nvcc makes from the sources now is byte for byte the committed file.
  # (File times say nothing after a git checkout.)
  local fresh
  fresh="$(mktemp)"
  trap 'rm -f "$fresh"' EXIT
  compile "$src" "$fresh"
  cmp -s "$fresh" "$ptx" || die "$ptx does not match kernels.cu/kernels.h; run 'make ptx' and commit the result"
  rm -f "$fresh"
  trap - EXIT
  say "kernels.ptx matches its sources"
  ver="$(sed -n 's/^\.version \([0-9.]*\).*/\1/p' "$ptx")"
  awk -v v="$ver" 'BEGIN { exit !(v != "" && v + 0 <= 7.8) }' ||
    die "$ptx has .version '$ver'; keep it <= 7.8 so drivers >= 520 can load it"
  ptxas="$("$envsh" ptxas)"
  for arch in ${HETSYNC_PTX_ARCHS:-sm_52 sm_70 sm_90}; do
    out="$("$ptxas" -arch="$arch" -v -Werror -o /dev/null "$ptx" 2>&1)" ||
      { echo "$out" >&2; die "ptxas -arch=$arch rejected $ptx"; }
    if echo "$out" | grep 'bytes spill' | grep -qv ' 0 bytes spill stores, 0 bytes spill loads'; then
      echo "$out" | grep -B2 'bytes spill' >&2
      die "ptxas -arch=$arch: register spills in $ptx"
    fi
    say "ptxas -arch=$arch: ok ($(echo "$out" | grep -c 'Compiling entry') kernels)"
  done
}

case "${1:-}" in
gen) gen ;;
check) check ;;
*) die "usage: $0 gen|check" ;;
esac
