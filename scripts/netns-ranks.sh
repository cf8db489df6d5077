#!/usr/bin/env bash
# Starts the ranks of one hetsync command in the hosts of a network of namespaces that
# netns-topo.sh built (PREFIX names it), as adopted ranks (HETSYNC_RANK, HETSYNC_WORLD_SIZE,
# HETSYNC_LOCAL_RANK/SIZE, HETSYNC_RENDEZVOUS on rank 0's host, HETSYNC_JOB_SECRET,
# HETSYNC_HOSTNAME = the namespace), supervises them and exits with the job's status. It is
# the launch command of experiments/thin-links.yaml: `hetsync experiment` starts every run
# as `netns-ranks.sh EXE train --np=N ... --out=DIR`.
#
# Usage (root): PREFIX=P scripts/netns-ranks.sh EXE SUBCOMMAND --np=N [FLAGS...] [--out=DIR]
#   PREFIX     the network (netns-topo.sh's PREFIX)
#   PLACEMENT  block (default: ceil(N/hosts) consecutive ranks per host) or cyclic
#   LINKS      the link matrix the ranks plan from (HETSYNC_LINKS): a file, "measure", or by
#              default the matrix the network's shaping promises for this placement
#   NETWORK    what to record of how the network was built (e.g. "uniform 4 hosts, 50 Mbit/s")
# With --out=DIR, DIR/network.json records the network, the placement and the link matrix
# file, DIR/links.json, before the ranks start. Rank 0's output passes through; the others'
# lines are prefixed "[rank] ". The first rank that fails stops the rest; SIGTERM or SIGINT
# stops them all.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
: "${PREFIX:?netns-ranks: set PREFIX to the network built by netns-topo.sh}"
topo_sh="$(dirname "$0")/../internal/netns/topo.sh"
np="" out=""
for a in "$@"; do
  case "$a" in
    --np=*)  np=${a#--np=} ;;
    --out=*) out=${a#--out=} ;;
  esac
done
[[ "$np" =~ ^[0-9]+$ ]] && [ "$np" -ge 1 ] || { echo "netns-ranks: the command needs --np=N with N >= 1 (got '${np}')" >&2; exit 2; }

mapfile -t hostlines < <(bash "$topo_sh" list)
hosts=${#hostlines[@]}
ns=() addr=()
for l in "${hostlines[@]}"; do
  read -r _ n a _ <<< "$l"
  ns+=("$n") addr+=("$a")
done
hostof=()
case "${PLACEMENT:-block}" in
  block)  per=$(( (np + hosts - 1) / hosts ))
          for (( r = 0; r < np; r++ )); do hostof+=($(( r / per ))); done ;;
  cyclic) for (( r = 0; r < np; r++ )); do hostof+=($(( r % hosts ))); done ;;
  *)      echo "netns-ranks: PLACEMENT '$PLACEMENT': want block or cyclic" >&2; exit 2 ;;
esac

links=${LINKS:-}
if [ -z "$links" ]; then
  [ -n "$out" ] || { echo "netns-ranks: without --out=DIR, give LINKS (a file or measure)" >&2; exit 2; }
  mkdir -p "$out"
  links=$(realpath "$out")/links.json
  bash "$topo_sh" links "${hostof[@]}" > "$links"
fi
if [ -n "$out" ]; then
  mkdir -p "$out"
  printf '{"network":"%s","prefix":"%s","hosts":%d,"ranks":%d,"placement":"%s","host_of_rank":[%s],"namespaces":["%s"],"links":"%s"}\n' \
    "${NETWORK:-}" "$PREFIX" "$hosts" "$np" "${PLACEMENT:-block}" "$(IFS=,; echo "${hostof[*]}")" \
    "$(IFS=,; echo "${ns[*]}" | sed 's/,/","/g')" "$links" > "$out/network.json"
fi

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
port=$(( 20000 + RANDOM % 20000 ))
pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap 'stop; wait; exit 143' TERM
trap 'stop; wait; exit 130' INT
# A rank's local rank is how many ranks before it share its host; the local size, how many do.
localrank=() onhost=()
for (( r = 0; r < np; r++ )); do
  h=${hostof[$r]}
  localrank[r]=${onhost[h]:-0}
  onhost[h]=$(( ${onhost[h]:-0} + 1 ))
done
for (( r = 0; r < np; r++ )); do
  h=${hostof[$r]}
  env=(HETSYNC_RANK=$r HETSYNC_WORLD_SIZE=$np HETSYNC_LOCAL_RANK=${localrank[r]} HETSYNC_LOCAL_SIZE=${onhost[h]}
       HETSYNC_RENDEZVOUS="${addr[${hostof[0]}]}:$port" HETSYNC_JOB_SECRET="$secret"
       HETSYNC_HOSTNAME="${ns[$h]}" HETSYNC_LINKS="$links")
  if [ "$r" -eq 0 ]; then
    ip netns exec "${ns[$h]}" env "${env[@]}" "$@" &
  else
    ip netns exec "${ns[$h]}" env "${env[@]}" "$@" > >(sed -u "s/^/[$r] /") 2>&1 &
  fi
  pids+=($!)
done
status=0
running=("${pids[@]}")
while [ "${#running[@]}" -gt 0 ]; do
  set +e
  wait -n -p done "${running[@]}"
  rc=$?
  set -e
  still=()
  for p in "${running[@]}"; do [ "$p" = "$done" ] || still+=("$p"); done
  running=("${still[@]}")
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    for r in "${!pids[@]}"; do [ "${pids[$r]}" = "$done" ] && echo "netns-ranks: rank $r (${ns[${hostof[$r]}]}) exited with status $rc; stopping the others" >&2; done
    status=$rc
    stop
  fi
done
exit $status
