# shellcheck shell=bash
# peers.sh: what scripts/bench-p4.sh and scripts/bench-ranks.sh share to drive the peers'
# comparison harness (PEERS_DIR: run_all.sh, setup.sh; not part of hetsync). Sourced, not run.
# The caller sets NAME (its name in messages) and defines usage() before calling peers_setup.

# ROOT is the repository root, whatever the caller's working directory.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# peers_setup ARGS...: --help prints usage and exits; any other argument, a missing PEERS_DIR
# or one without run_all.sh exits 2 naming it. It sets PEERS_BIN (default /tmp/peers-bin).
peers_setup() {
	case "${1:-}" in
	-h | --help)
		usage
		exit 0
		;;
	"") ;;
	*)
		echo "$NAME: unexpected argument \"$1\" (see --help)" >&2
		exit 2
		;;
	esac
	if [[ -z "${PEERS_DIR:-}" ]]; then
		echo "$NAME: PEERS_DIR is not set: it names the peers' harness directory (with run_all.sh)" >&2
		exit 2
	fi
	if [[ ! -f "$PEERS_DIR/run_all.sh" ]]; then
		echo "$NAME: PEERS_DIR=$PEERS_DIR has no run_all.sh: not the peers' harness" >&2
		exit 2
	fi
	PEERS_BIN=${PEERS_BIN:-/tmp/peers-bin}
}

# peers_build: the peers' benchmarks, built into PEERS_BIN with the harness's setup.sh when
# they are missing, and bin/hetsync. Call it once the caller's own settings are checked.
peers_build() {
	if [[ ! -x $PEERS_BIN/mpi_allreduce.openmpi ]]; then
		echo "$NAME: building the peers' benchmarks into $PEERS_BIN ($PEERS_DIR/setup.sh)" >&2
		PEERS_BIN=$PEERS_BIN bash "$PEERS_DIR/setup.sh" >&2
	fi
	echo "$NAME: building $ROOT/bin/hetsync" >&2
	(cd "$ROOT" && go build -o bin/hetsync ./cmd/hetsync)
}

# PEERS_AWK_SIZE is an awk function, sz(bytes), that writes a size as the tables do.
# shellcheck disable=SC2034 # used by the scripts that source this file
PEERS_AWK_SIZE='function sz(x) {
	if (x >= 1048576) return x / 1048576 " MiB"
	if (x >= 1024) return x / 1024 " KiB"
	return x " B"
}'
