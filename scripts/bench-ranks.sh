#!/usr/bin/env bash
# bench-ranks.sh: the rank-count table. Allreduce time of hetsync's default same-host path
# against Open MPI's shared-memory path, both with more ranks than this host has cores
# (`mpirun --oversubscribe`), in one run of the peers' comparison harness, which interleaves
# the two round by round and keeps medians. Prints a table with hetsync's time over Open MPI's
# for every rank count and size (below 1: hetsync is faster) and writes it to
# $RESULTS_DIR/ranks.md. Run it from anywhere; it builds bin/hetsync in the repository root.
#
#   PEERS_DIR=/path/to/peers scripts/bench-ranks.sh
#   RANKS="8 16" SIZES="4096 65536" REPEATS=1 PEERS_DIR=... scripts/bench-ranks.sh   # short check
#
# The harness (PEERS_DIR, its run_all.sh and summarize.py, and the Open MPI benchmark it builds
# into PEERS_BIN with its setup.sh) is not part of hetsync; this script only drives it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-ranks.sh [--help]

Environment:
  PEERS_DIR     the peers' harness directory (run_all.sh, setup.sh); required
  PEERS_BIN     its built benchmarks (default /tmp/peers-bin; built with setup.sh when missing)
  RESULTS_DIR   where the harness writes raw runs and summaries (default /tmp/bench-ranks)
  RANKS         rank counts (default "8 16 32 64")
  SIZES         message sizes in bytes, each STEP times the one before
                (default "4096 65536 1048576 16777216", STEP 16)
  REPEATS       rounds of every configuration (default 3)
  RUN_TIMEOUT   seconds one run of one rank count may take (default 900)
  JOIN_TIMEOUT  how long hetsync's ranks may take to form a job (default 3m; 64 ranks
                on 2 cores take about a minute under load)
  SETTLE        hetsync's untimed settling before the first timed size (default 2s)
EOF
}

NAME=bench-ranks.sh
# shellcheck source=scripts/lib/peers.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/peers.sh"
peers_setup "$@"

RESULTS_DIR=${RESULTS_DIR:-/tmp/bench-ranks}
RANKS=${RANKS:-"8 16 32 64"}
SIZES=${SIZES:-"4096 65536 1048576 16777216"}
STEP=${STEP:-16}
REPEATS=${REPEATS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
JOIN_TIMEOUT=${JOIN_TIMEOUT:-3m}
SETTLE=${SETTLE:-2s}

read -r -a sizes <<<"$SIZES"
if ((${#sizes[@]} == 0)); then
	echo "bench-ranks.sh: SIZES is empty" >&2
	exit 2
fi
for ((i = 1; i < ${#sizes[@]}; i++)); do
	if ((sizes[i] != sizes[i - 1] * STEP)); then
		echo "bench-ranks.sh: SIZES: ${sizes[i]} is not STEP=$STEP times ${sizes[i - 1]} (the harness steps by a factor)" >&2
		exit 2
	fi
done

peers_build

# The harness splits OURS_CMD on spaces: no word may contain one.
ours="$ROOT/bin/hetsync bench -np {P} --collective auto --security none --format tsv"
ours+=" --join-timeout $JOIN_TIMEOUT --settle $SETTLE --attribute 0"

mkdir -p "$RESULTS_DIR"
echo "bench-ranks.sh: ranks $RANKS, sizes ${sizes[*]}, $REPEATS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
PEERS_BIN=$PEERS_BIN RESULTS_DIR=$RESULTS_DIR REPEATS=$REPEATS RUN_TIMEOUT=$RUN_TIMEOUT \
	MIN_BYTES=${sizes[0]} MAX_BYTES=${sizes[-1]} STEP=$STEP \
	PEER_GROUPS=ompi_shm MPI_PS=$RANKS OURS_PS=$RANKS OURS_NAME=hetsync_shm OURS_CMD=$ours \
	bash "$PEERS_DIR/run_all.sh" >&2

# One row per rank count and size from the harness's per-configuration medians
# (RESULTS_DIR/<config>.tsv: bytes count reps avg_us_med ...).
table() {
	local p b ours mpi
	echo "| ranks | size | Open MPI | hetsync | hetsync ÷ Open MPI |"
	echo "|---|---|---|---|---|"
	for p in $RANKS; do
		for b in "${sizes[@]}"; do
			mpi=$(median_us "$RESULTS_DIR/openmpi_shm_p$p.tsv" "$b")
			ours=$(median_us "$RESULTS_DIR/hetsync_shm_p$p.tsv" "$b")
			awk -v p="$p" -v b="$b" -v m="$mpi" -v o="$ours" 'function t(us) {
				if (us == "") return "no result"
				if (us >= 1000) return sprintf("%.2f ms", us / 1000)
				return sprintf("%.0f µs", us)
			}
			'"$PEERS_AWK_SIZE"'
			BEGIN {
				r = (m != "" && o != "" && m > 0) ? sprintf("%.2f×", o / m) : "–"
				printf "| %s | %s | %s | %s | %s |\n", p, sz(b), t(m), t(o), r
			}'
		done
	done
}
median_us() {
	[[ -f $1 ]] || return 0
	awk -v b="$2" '!/^#/ && $1 == b { print $4 }' "$1"
}

{
	echo "Allreduce time, float32 sum, medians of $REPEATS rounds; $(nproc) cores."
	echo
	table
} | tee "$RESULTS_DIR/ranks.md"
echo "bench-ranks.sh: table in $RESULTS_DIR/ranks.md, the harness's summary in $RESULTS_DIR/summary.md" >&2
