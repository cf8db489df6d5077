#!/usr/bin/env bash
# Installs the Debian packages hetsync's build and tests need, only when they are missing.
# Usage: scripts/setup-system.sh PACKAGE...   (idempotent; fast when everything is present)
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "hetsync: missing Debian packages: ${missing[*]}" >&2
  echo "hetsync: install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "hetsync: missing packages ${missing[*]} and no apt-get on this machine; install their equivalents by hand" >&2
  exit 1
fi
echo "hetsync: installing ${missing[*]} ..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
