#!/usr/bin/env bash
# bench-p4.sh: the P = 4 tables of docs/performance.md. Allreduce of hetsync beside Open MPI (its default and
# each forced algorithm) and Gloo, 4 ranks on this host, 4 KiB to 256 MiB, in one run of the
# peers' comparison harness per data path (the harness runs every configuration round by
# round and keeps medians). For each size it names the best peer and prints hetsync's busbw
# over the best peer's (the time over the best peer's time for the smallest size, where
# latency is what counts), and writes the table to $RESULTS_DIR/<path>/p4.md.
#
#   PEERS_DIR=/path/to/peers scripts/bench-p4.sh                 # tcp and shm
#   PATHS=tcp REPEATS=1 MAX_BYTES=1048576 PEERS_DIR=... scripts/bench-p4.sh   # short check
#
# The harness (PEERS_DIR: run_all.sh, summarize.py, setup.sh, which builds Open MPI's benchmark
# into PEERS_BIN) is not part of hetsync; this script only drives it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-p4.sh [--help]

Environment:
  PEERS_DIR     the peers' harness directory (run_all.sh, setup.sh); required
  PEERS_BIN     its built benchmarks (default /tmp/peers-bin; built with setup.sh when missing)
  RESULTS_DIR   where the harness writes, one directory per path (default /tmp/bench-p4)
  PATHS         data paths to measure (default "tcp shm"): tcp is --data-path tcp beside
                Open MPI's btl self,tcp and Gloo; shm is hetsync's default same-host path
                beside Open MPI's shared memory
  ALGS          Open MPI's forced allreduce algorithms run beside its default
                (default "3 4 5 6": recursive doubling, ring, segmented ring, Rabenseifner)
  MIN_BYTES, MAX_BYTES, STEP
                the sizes (default 4096, 268435456, 4)
  REPEATS       rounds of every configuration (default 3)
EOF
}

NAME=bench-p4.sh
# shellcheck source=scripts/lib/peers.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/peers.sh"
peers_setup "$@"

RESULTS_DIR=${RESULTS_DIR:-/tmp/bench-p4}
PATHS=${PATHS:-"tcp shm"}
ALGS=${ALGS:-"3 4 5 6"}
MIN_BYTES=${MIN_BYTES:-4096}
MAX_BYTES=${MAX_BYTES:-268435456}
STEP=${STEP:-4}
REPEATS=${REPEATS:-3}

for path in $PATHS; do
	case $path in
	tcp | shm) ;;
	*)
		echo "bench-p4.sh: PATHS: unknown path \"$path\" (tcp or shm)" >&2
		exit 2
		;;
	esac
done

peers_build

# table DIR OURS: one row per size from the harness's per-configuration medians
# (DIR/<config>.tsv: bytes count reps avg_us_med algbw_med busbw_med ...): every peer
# configuration but OURS competes for "best peer".
table() {
	local dir=$1 ours=$2 files
	files=("$dir"/openmpi_*.tsv)
	if compgen -G "$dir/gloo_*.tsv" >/dev/null; then
		files+=("$dir"/gloo_*.tsv)
	fi
	awk -v ours="$ours" -v min="$MIN_BYTES" '
	FNR == 1 {
		name = FILENAME
		sub(/.*\//, "", name)
		sub(/\.tsv$/, "", name)
	}
	/^#/ { next }
	{
		b = $1
		sizes[b] = 1
		if (name == ours) {
			us[b] = $4
			bw[b] = $6
		} else if (!(b in best) || (b == min ? $4 < bestus[b] : $6 > best[b])) {
			best[b] = $6
			bestus[b] = $4
			who[b] = name
		}
	}
	'"$PEERS_AWK_SIZE"'
	END {
		print "| size | best peer | its busbw, GB/s (smallest size: time) | hetsync | hetsync ÷ best peer |"
		print "|---|---|---|---|---|"
		n = 0
		for (b in sizes) order[++n] = b + 0
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && order[j - 1] > order[j]; j--) {
				t = order[j]
				order[j] = order[j - 1]
				order[j - 1] = t
			}
		for (i = 1; i <= n; i++) {
			b = order[i]
			if (!(b in us) || !(b in best)) {
				printf "| %s | %s | %s | %s | – |\n", sz(b), (b in who ? who[b] : "none"), (b in best ? best[b] : "–"), (b in bw ? bw[b] : "no result")
			} else if (b == min) {
				printf "| %s | %s | %.1f µs | %.1f µs | %.2f× the time |\n", sz(b), who[b], bestus[b], us[b], us[b] / bestus[b]
			} else {
				printf "| %s | %s | %.2f | %.2f | %.2f× |\n", sz(b), who[b], best[b], bw[b], (best[b] > 0 ? bw[b] / best[b] : 0)
			}
		}
	}' "${files[@]}" "$dir/$ours.tsv"
}

for path in $PATHS; do
	dir=$RESULTS_DIR/$path
	mkdir -p "$dir"
	ours="$ROOT/bin/hetsync bench -np {P} --collective auto --security none --format tsv"
	groups="ompi_shm ompi_alg_shm"
	if [[ $path == tcp ]]; then
		ours+=" --data-path tcp"
		groups="ompi_tcp ompi_alg_tcp gloo"
	fi
	echo "bench-p4.sh: $path, sizes $MIN_BYTES..$MAX_BYTES ×$STEP, $REPEATS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	PEERS_BIN=$PEERS_BIN RESULTS_DIR=$dir REPEATS=$REPEATS MIN_BYTES=$MIN_BYTES MAX_BYTES=$MAX_BYTES \
		STEP=$STEP PEER_GROUPS=$groups MPI_PS=4 ALG_P=4 ALGS=$ALGS GLOO_PS=4 \
		OURS_PS=4 OURS_NAME=hetsync_$path OURS_CMD=$ours \
		bash "$PEERS_DIR/run_all.sh" >&2
	{
		echo "$path, P = 4, allreduce float32 sum, medians of $REPEATS rounds ($(nproc) cores):"
		echo
		table "$dir" "hetsync_${path}_p4"
	} | tee "$dir/p4.md"
	echo
done
echo "bench-p4.sh: tables in $RESULTS_DIR/*/p4.md, the harness's summaries in $RESULTS_DIR/*/summary.md" >&2
