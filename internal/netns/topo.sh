#!/usr/bin/env bash
# Builds and removes small heterogeneous networks of Linux network namespaces on one machine:
# every "host" is a namespace with one interface, eth0, on a private subnet; the switches
# (one Linux bridge per rack, a core bridge joining the racks) live in a namespace of their
# own, so nothing is added to the caller's namespace and two networks with different prefixes
# never meet. Every link is shaped in both directions with tc tbf on the two ends of its veth
# pair, unless RATE is 0. netem is not used (it is missing on some kernels): latency, where a test needs it,
# comes from the transport's delay decorator.
#
# Usage (root):
#   topo.sh up TOPO [HOSTS]      build; prints "host NAMESPACE ADDRESS RACK" per host
#   topo.sh down                 remove every namespace of PREFIX
#   topo.sh rate LINK MBIT       re-shape one link while traffic runs: LINK is a host index
#                                (its access link) or "uplinkR" (rack R's link to the core)
#   topo.sh list                 the hosts of an existing network, as "up" prints them
#   topo.sh links H0 H1 ...      the link matrix (JSON, as bench --plan-links reads it) of ranks
#                                placed on hosts H0, H1, ... (one host index per rank), from the
#                                rates the network was built with
# TOPO:
#   uniform   HOSTS hosts (default 4) on one switch, every access link at RATE
#   slowhost  the same, the last host's access link RATIO times slower
#   racks     HOSTS hosts (default 4) in RACKS racks (default 2, hosts dealt in blocks), access
#             links at RATE, each rack's uplink to the core RATIO times slower
# Environment: PREFIX (namespace prefix, default hsnet), RATE (access rate in Mbit/s, default
# 200; 0 leaves every link unshaped, at veth speed), RATIO (default 10), RACKS (default 2),
# SUBNET (first three octets, default 10.79.0), BURST (token bucket in bytes, default 10 ms of
# traffic and at least 32768), LATENCY_MS (longest wait in a link's queue, default 20).
set -euo pipefail

PREFIX=${PREFIX:-hsnet}
RATE=${RATE:-200}
RATIO=${RATIO:-10}
RACKS=${RACKS:-2}
SUBNET=${SUBNET:-10.79.0}
BURST=${BURST:-}
LATENCY_MS=${LATENCY_MS:-20}
SW="$PREFIX-sw"

die() { echo "netns-topo: $*" >&2; exit 1; }

# shape NS DEV KBIT: a token bucket of KBIT kbit/s on DEV's egress in namespace NS (none when
# KBIT is 0). By default the bucket holds 10 ms of traffic (at least 32 KiB, so that one GSO
# segment fits) and the queue 20 ms, so a saturated link neither bursts far above its rate nor
# delays small messages much; BURST and LATENCY_MS set them for a test that needs others.
shape() {
  local ns=$1 dev=$2 kbit=$3
  [ "$kbit" -gt 0 ] || return 0
  local burst=${BURST:-$(( kbit * 1000 / 8 / 100 ))}
  [ -n "$BURST" ] || [ "$burst" -ge 32768 ] || burst=32768
  # Delete, then add: replacing a loaded tbf's rate in place has left its queue stalled for
  # good with packets in it (seen once in CI); a fresh qdisc drops the queue and TCP resends.
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "${kbit}kbit" burst "$burst" latency "${LATENCY_MS}ms"
}

# link NS_A DEV_A NS_B DEV_B KBIT: a veth pair shaped at KBIT in both directions, both ends up.
link() {
  ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
  ip -n "$1" link set "$2" up
  ip -n "$3" link set "$4" up
  shape "$1" "$2" "$5"
  shape "$3" "$4" "$5"
}

bridge() {
  ip -n "$SW" link add "$1" type bridge
  ip -n "$SW" link set "$1" up
}

host_ns() { echo "$PREFIX-h$1"; }

rack_of() { # rack of host $1 among $2 hosts, hosts dealt to racks in blocks
  if [ "$TOPO" = racks ]; then echo $(( $1 * RACKS / $2 )); else echo 0; fi
}

up() {
  TOPO=$1
  local n=${2:-4}
  case "$TOPO" in uniform|slowhost|racks) ;; *) die "unknown topology '$TOPO' (uniform, slowhost, racks)";; esac
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "HOSTS '$n': want 1..200"
  [[ "$RATE" =~ ^[0-9]+$ ]] || die "RATE '$RATE': want Mbit/s, a positive integer (0: unshaped)"
  if [ -n "$BURST" ]; then
    [[ "$BURST" =~ ^[0-9]+$ ]] && [ "$BURST" -ge 1 ] || die "BURST '$BURST': want bytes, a positive integer"
  fi
  [[ "$LATENCY_MS" =~ ^[0-9]+$ ]] && [ "$LATENCY_MS" -ge 1 ] || die "LATENCY_MS '$LATENCY_MS': want a positive integer"
  [[ "$RATIO" =~ ^[0-9]+$ ]] && [ "$RATIO" -ge 1 ] || die "RATIO '$RATIO': want a positive integer"
  if [ "$TOPO" = racks ]; then
    [[ "$RACKS" =~ ^[0-9]+$ ]] && [ "$RACKS" -ge 1 ] && [ "$RACKS" -le "$n" ] || die "RACKS '$RACKS': want 1..$n"
  fi
  ip netns list | grep -q "^$SW\b" && die "a network with prefix $PREFIX exists: run 'down' first or set PREFIX"
  local fast=$(( RATE * 1000 )) slow=$(( RATE * 1000 / RATIO ))
  ip netns add "$SW"
  trap 'down >/dev/null 2>&1' ERR
  ip -n "$SW" link set lo up
  local racks=1
  [ "$TOPO" = racks ] && racks=$RACKS
  for (( r = 0; r < racks; r++ )); do bridge "rack$r"; done
  if [ "$TOPO" = racks ]; then
    bridge core
    for (( r = 0; r < racks; r++ )); do
      link "$SW" "up$r" "$SW" "dn$r" "$slow"
      ip -n "$SW" link set "up$r" master "rack$r"
      ip -n "$SW" link set "dn$r" master core
    done
  fi
  for (( i = 0; i < n; i++ )); do
    local ns r kbit=$fast
    ns=$(host_ns "$i")
    r=$(rack_of "$i" "$n")
    [ "$TOPO" = slowhost ] && [ "$i" -eq $(( n - 1 )) ] && kbit=$slow
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    link "$SW" "h$i" "$ns" eth0 "$kbit"
    ip -n "$SW" link set "h$i" master "rack$r"
    ip -n "$ns" addr add "$SUBNET.$(( i + 1 ))/24" dev eth0
  done
  echo "$TOPO $n $RACKS $RATE $RATIO" > "$(statefile)"
  trap - ERR
  list
}

statefile() { echo "/run/netns-topo-$PREFIX"; }

list() {
  [ -f "$(statefile)" ] || die "no network with prefix $PREFIX"
  local n
  read -r TOPO n RACKS RATE RATIO < "$(statefile)"
  for (( i = 0; i < n; i++ )); do
    echo "host $(host_ns "$i") $SUBNET.$(( i + 1 )) $(rack_of "$i" "$n")"
  done
}

# stats: every shaped link's queue counters (sent, dropped, overlimits, backlog), switch first,
# for a test that failed to show what the links did.
stats() {
  list >/dev/null
  local n
  read -r TOPO n RACKS RATE RATIO < "$(statefile)"
  echo "== $SW"; ip netns exec "$SW" tc -s qdisc show
  for (( i = 0; i < n; i++ )); do
    echo "== $(host_ns "$i")"; ip netns exec "$(host_ns "$i")" tc -s qdisc show dev eth0
  done
}

# links H...: the matrix the network's shaping promises. A message between two hosts runs at
# the slowest link of its path (the two access links, and the uplinks when the racks differ);
# ranks on one host talk over loopback. Latencies are those of a veth hop and of loopback.
links() {
  list >/dev/null
  local n
  read -r TOPO n RACKS RATE RATIO < "$(statefile)"
  [ $# -ge 1 ] || die "links: give one host index per rank"
  [ "$RATE" -gt 0 ] || die "links: the network with prefix $PREFIX is not shaped, so it promises no rates"
  local h racks=()
  for h in "$@"; do
    [[ "$h" =~ ^[0-9]+$ ]] && [ "$h" -lt "$n" ] || die "links: host '$h' is not in 0..$(( n - 1 ))"
  done
  for (( i = 0; i < n; i++ )); do racks+=("$(rack_of "$i" "$n")"); done
  echo "$@" | awk -v topo="$TOPO" -v n="$n" -v rate="$RATE" -v ratio="$RATIO" -v racks="${racks[*]}" '
    {
      p = NF; split(racks, rack, " ")
      for (r = 1; r <= p; r++) { h[r] = $r; if (!($r in id)) id[$r] = k++; }
      printf "{\"p\":%d,\"host\":[", p
      for (r = 1; r <= p; r++) printf "%s%d", (r > 1 ? "," : ""), id[h[r]]
      printf "],\"links\":["
      for (r = 1; r <= p; r++) {
        printf "%s[", (r > 1 ? "," : "")
        for (q = 1; q <= p; q++) {
          if (h[r] == h[q]) { a = 20e-6; b = 1 / 2e9 }
          else {
            mbit = rate
            if (topo == "slowhost" && (h[r] == n - 1 || h[q] == n - 1)) mbit = rate / ratio
            if (topo == "racks" && rack[h[r] + 1] != rack[h[q] + 1]) mbit = rate / ratio
            a = 60e-6; b = 8 / (mbit * 1e6)
          }
          printf "%s{\"alpha_s\":%g,\"beta_s_per_b\":%.6g}", (q > 1 ? "," : ""), a, b
        }
        printf "]"
      }
      printf "]}\n"
    }'
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-(sw|h[0-9]+)$"); do
    ip netns del "$ns"
  done
  rm -f "$(statefile)"
}

rate() {
  local which=$1 mbit=$2
  [[ "$mbit" =~ ^[0-9]+$ ]] && [ "$mbit" -ge 1 ] || die "rate '$mbit': want Mbit/s, a positive integer"
  local kbit=$(( mbit * 1000 ))
  case "$which" in
    uplink[0-9]*) local r=${which#uplink}
                  ip -n "$SW" link show "up$r" >/dev/null 2>&1 || die "no uplink $r in $PREFIX"
                  shape "$SW" "up$r" "$kbit"; shape "$SW" "dn$r" "$kbit" ;;
    [0-9]*)       ip -n "$SW" link show "h$which" >/dev/null 2>&1 || die "no host $which in $PREFIX"
                  shape "$SW" "h$which" "$kbit"; shape "$(host_ns "$which")" eth0 "$kbit" ;;
    *)            die "link '$which': want a host index or uplinkR" ;;
  esac
}

[ "$(id -u)" -eq 0 ] || die "network namespaces need root"
command -v ip >/dev/null && command -v tc >/dev/null || die "ip and tc (Debian's iproute2) are missing"
case "${1:-}" in
  up)   shift; up "$@" ;;
  down) down ;;
  rate) [ $# -eq 3 ] || die "usage: rate LINK MBIT"; rate "$2" "$3" ;;
  list) list ;;
  stats) stats ;;
  links) shift; links "$@" ;;
  *)    die "usage: topo.sh up TOPO [HOSTS] | down | rate LINK MBIT | list | stats | links H0 H1 ...  (PREFIX=$PREFIX)" ;;
esac
