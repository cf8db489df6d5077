#!/usr/bin/env bash
# Installs Fashion-MNIST from Debian's dataset-fashion-mnist package into
# /usr/share/datasets/fashion-mnist (four .gz IDX files), which hetsync finds by itself.
# Idempotent: when the files are present it only says so. Without root it prints what to do.
set -euo pipefail

DIR=/usr/share/datasets/fashion-mnist
PKG=dataset-fashion-mnist
FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

have_all() {
	local f
	for f in "${FILES[@]}"; do
		[[ -s "$DIR/$f" ]] || return 1
	done
}

if have_all; then
	echo "setup-data: Fashion-MNIST present in $DIR"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "setup-data: Fashion-MNIST is missing from $DIR and this is not root." >&2
	echo "setup-data: run 'sudo apt-get install $PKG', or pass --data DIR / set HETSYNC_DATA to a" >&2
	echo "setup-data: directory holding ${FILES[*]} (raw or .gz)." >&2
	exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "setup-data: no apt-get here; put ${FILES[*]} in a directory and pass --data DIR or set HETSYNC_DATA." >&2
	exit 1
fi

echo "setup-data: installing $PKG"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "$PKG" >/dev/null

if ! have_all; then
	echo "setup-data: $PKG installed but $DIR lacks some of ${FILES[*]}" >&2
	exit 1
fi
echo "setup-data: Fashion-MNIST installed in $DIR"
