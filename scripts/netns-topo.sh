#!/usr/bin/env bash
# Heterogeneous test networks of network namespaces (uniform, one slow host, two racks with a
# thin uplink). The implementation lives beside the Go package that tests build the same
# networks with (internal/netns), so that both build exactly the same thing; see its header
# for the usage: scripts/netns-topo.sh up racks 4 | down | rate LINK MBIT | list.
exec bash "$(dirname "$0")/../internal/netns/topo.sh" "$@"
