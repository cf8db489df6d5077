#!/usr/bin/env bash
# Runs `hetsync bench` with its ranks on a shaped network of namespaces (see netns-topo.sh),
# every rank planning from the link matrix the network promises (or the one the job measures,
# LINKS=measure), over plain TCP.
#
# Usage (root): scripts/bench-topo.sh TOPO HOSTS PLACEMENT [BENCH FLAGS...]
#   TOPO, HOSTS  as netns-topo.sh up takes them (RATE, RATIO, RACKS from the environment)
#   PLACEMENT    block, cyclic, random (seeded by SEED, default 1), or host indices "0,1,2,0"
#   NP           ranks (default 2 per host)
#   LINKS        --plan-links: measure (plan from the links the job measures) or a file (default:
#                the matrix the shaped network promises)
# Example: RATE=1000 RATIO=10 scripts/bench-topo.sh racks 4 cyclic --collective configs -b 8M -e 64M -f 8
# Prints rank 0's table; the placement and the matrix file go to stderr first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
topo=$1 hosts=$2 placement=$3
shift 3
np=${NP:-$(( hosts * 2 ))}
bin=${HETSYNC_BIN:-bin/hetsync}
[ -x "$bin" ] || go build -o "$bin" ./cmd/hetsync
export PREFIX=${PREFIX:-hsbench$$}
topo_sh=internal/netns/topo.sh
work=$(mktemp -d)
cleanup() { bash "$topo_sh" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
bash "$topo_sh" up "$topo" "$hosts" > "$work/hosts"

case "$placement" in
  block)  place=$(awk -v np="$np" -v h="$hosts" 'BEGIN { per = int((np + h - 1) / h); for (r = 0; r < np; r++) printf "%d ", int(r / per) }') ;;
  cyclic) place=$(awk -v np="$np" -v h="$hosts" 'BEGIN { for (r = 0; r < np; r++) printf "%d ", r % h }') ;;
  random) place=$(awk -v np="$np" -v h="$hosts" -v seed="${SEED:-1}" 'BEGIN { srand(seed); for (r = 0; r < np; r++) c[r] = r % h;
            for (r = np - 1; r > 0; r--) { j = int(rand() * (r + 1)); t = c[r]; c[r] = c[j]; c[j] = t }
            for (r = 0; r < np; r++) printf "%d ", c[r] }') ;;
  *)      place=${placement//,/ } ;;
esac
read -r -a hostof <<< "$place"
[ "${#hostof[@]}" -eq "$np" ] || { echo "bench-topo: placement '$placement' has ${#hostof[@]} ranks, NP=$np" >&2; exit 2; }
bash "$topo_sh" links "${hostof[@]}" > "$work/links.json"
echo "bench-topo: $topo, $hosts hosts, RATE=${RATE:-200} RATIO=${RATIO:-10}, ranks on hosts: ${hostof[*]}" >&2

mapfile -t ns < <(awk '{print $2}' "$work/hosts")
mapfile -t addr < <(awk '{print $3}' "$work/hosts")
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# bench --links measures the links itself and plans nothing, so it takes no matrix to plan from.
plan=(--plan-links "${LINKS:-$work/links.json}")
for a in "$@"; do [ "$a" = --links ] && plan=(); done
pids=()
for (( r = 0; r < np; r++ )); do
  h=${hostof[$r]} local=0 size=0
  for (( q = 0; q < np; q++ )); do
    if [ "${hostof[$q]}" = "$h" ]; then
      size=$(( size + 1 ))
      [ "$q" -lt "$r" ] && local=$(( local + 1 ))
    fi
  done
  out=/dev/null
  [ "$r" -eq 0 ] && out=$work/rank0
  ip netns exec "${ns[$h]}" env HETSYNC_RANK=$r HETSYNC_WORLD_SIZE=$np HETSYNC_LOCAL_RANK=$local \
    HETSYNC_LOCAL_SIZE=$size HETSYNC_RENDEZVOUS="${addr[${hostof[0]}]}:29471" HETSYNC_JOB_SECRET="$secret" \
    HETSYNC_HOSTNAME="${ns[$h]}" \
    "$bin" bench "${plan[@]}" --data-path tcp --security none "$@" > "$out" 2>"$work/err$r" &
  pids+=($!)
done
status=0
for r in "${!pids[@]}"; do
  if ! wait "${pids[$r]}"; then
    status=1
    echo "bench-topo: rank $r failed:" >&2
    cat "$work/err$r" >&2
  fi
done
cat "$work/rank0"
exit $status
