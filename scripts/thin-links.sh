#!/usr/bin/env bash
# Trains on thin links, with one command: builds a network of namespaces (netns-topo.sh:
# HOSTS hosts on one switch, every host's link shaped to RATE Mbit/s), runs experiment files
# whose runs start their ranks on those hosts (their launch command is netns-ranks.sh), each
# with its report, and removes the network again, also when an experiment fails or is
# interrupted.
#
# Usage (root): scripts/thin-links.sh [FILE...] [--out DIR]
#   FILE   experiment files (default experiments/thin-links.yaml and thin-links-wbsp.yaml),
#          each into DIR/NAME (NAME: the file's name without .yaml), its report in
#          DIR/NAME/report
#   --out  directory (default runs/thin-links-TIME)
# Environment: TOPO (uniform, slowhost or racks; default uniform), HOSTS (default 4), RATE
# (Mbit/s, default 50), RATIO and RACKS (slowhost, racks), PLACEMENT (block or cyclic),
# HETSYNC_BIN (default bin/hetsync, built when missing).
# Example: scripts/thin-links.sh                      # the report: runs/thin-links-*/report/
#          RATE=20 scripts/thin-links.sh experiments/thin-links-short.yaml --out /tmp/tl
set -euo pipefail
cd "$(dirname "$0")/.."
files=() out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out)   [ $# -ge 2 ] || { echo "thin-links: --out needs a directory" >&2; exit 2; }; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*)      echo "thin-links: unknown flag $1" >&2; exit 2 ;;
    *)       files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || files=(experiments/thin-links.yaml experiments/thin-links-wbsp.yaml)
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "thin-links: no experiment file $f" >&2; exit 2; }
done
out=${out:-runs/thin-links-$(date -u +%Y%m%d-%H%M%S)}
bin=${HETSYNC_BIN:-bin/hetsync}
[ -x "$bin" ] || go build -o "$bin" ./cmd/hetsync

export TOPO=${TOPO:-uniform} HOSTS=${HOSTS:-4} RATE=${RATE:-50}
export PREFIX=hstl$$  # its own namespaces, whatever PREFIX the caller has
case "$TOPO" in
  uniform)  export NETWORK="uniform, $HOSTS hosts, every link $RATE Mbit/s" ;;
  slowhost) export NETWORK="slowhost, $HOSTS hosts, links $RATE Mbit/s, the last host's ${RATIO:-10}x slower" ;;
  racks)    export NETWORK="racks, $HOSTS hosts in ${RACKS:-2} racks, links $RATE Mbit/s, uplinks ${RATIO:-10}x slower" ;;
esac
topo_sh=internal/netns/topo.sh
work=$(mktemp -d)
down() { bash "$topo_sh" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap down EXIT
# The ranks read the data set decompressed once here, not each on its own: eight ranks
# decompressing it at once on a small, busy machine spend much of a run's start doing so.
pkg=/usr/share/datasets/fashion-mnist
if [ -z "${HETSYNC_DATA:-}" ] && [ -s "$pkg/train-images-idx3-ubyte.gz" ]; then
  mkdir "$work/data"
  for f in "$pkg"/*-ubyte.gz; do gunzip -c "$f" > "$work/data/$(basename "$f" .gz)"; done
  export HETSYNC_DATA=$work/data
fi
# With a trap set, a signal waits for the command running now: the network is built (or its
# script has failed) before it is removed, never both at once.
trap 'exit 130' INT
trap 'exit 143' TERM
bash "$topo_sh" up "$TOPO" "$HOSTS" >/dev/null
echo "thin-links: $NETWORK (namespaces $PREFIX-*) into $out" >&2
status=0
for f in "${files[@]}"; do
  name=$(basename "$f" .yaml)
  echo "thin-links: $f into $out/$name" >&2
  # In the background, so that a signal reaches this script at once: the experiment stops
  # its runs on SIGTERM, and the network comes down once it has.
  "$bin" experiment "$f" --out "$out/$name" &
  exp=$!
  trap 'kill -TERM $exp 2>/dev/null; wait $exp; exit 130' INT
  trap 'kill -TERM $exp 2>/dev/null; wait $exp; exit 143' TERM
  wait $exp || status=$?
done
exit $status
