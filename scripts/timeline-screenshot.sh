#!/usr/bin/env bash
# The timeline screenshot of docs/troubleshooting.md: a 4-rank `hetsync train` whose rank 3 sleeps 40 ms a step
# writes its --timeline, the ranks' files are merged into one trace (jq), and Chromium's own
# DevTools (its Performance panel, served on the debugging port, so nothing is fetched from
# the internet) opens it, driven by puppeteer-core, and saves a screenshot.
#
#   scripts/timeline-screenshot.sh [OUT.png] [TRACE.json]
#
# OUT defaults to docs/img/timeline.png; TRACE, a trace already merged, skips the run.
# Needs chromium and jq (installed through apt when run as root) and node with npm;
# puppeteer-core is installed into ~/.cache/hetsync/screenshot.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img/timeline.png}
trace=${2:-}
ranks=4

need() {
  command -v "$1" >/dev/null && return
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "timeline-screenshot: $1 is missing: apt-get install $2 (as root)" >&2
    exit 1
  fi
}
need chromium chromium
need jq jq
command -v npm >/dev/null || { echo "timeline-screenshot: node and npm are needed" >&2; exit 1; }
mods=${XDG_CACHE_HOME:-$HOME/.cache}/hetsync/screenshot
if [ ! -d "$mods/node_modules/puppeteer-core" ]; then
  mkdir -p "$mods"
  npm install --prefix "$mods" --no-audit --no-fund --silent puppeteer-core@25 >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$trace" ]; then
  go build -o "$work/hetsync" ./cmd/hetsync
  "$work/hetsync" train -np $ranks --sync ssgd --max-rounds 10 --eval-every 100 --step-sleep 0,0,0,40 \
    --out "$work/run" --timeline "$work/trace.json" >/dev/null
  # Metadata events carry no time; the viewer would start its axis at 0 for them, so they
  # take the first event's.
  jq -s 'add | (map(select(.ph == "X") | .ts) | min) as $t0 | map(if .ph == "M" then .ts = $t0 else . end)' \
    "$work"/trace.rank*.json >"$work/merged.json"
  trace=$work/merged.json
fi
mkdir -p "$(dirname "$out")"
NODE_PATH=$mods/node_modules node scripts/timeline-screenshot.js "$(command -v chromium)" "$(realpath "$trace")" "$out" $ranks
echo "$out"
