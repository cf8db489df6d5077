// Package netns builds small heterogeneous networks of Linux network namespaces on one
// machine, so that tests and benchmarks can run the ranks of a job on "hosts" with their own
// addresses and shaped links: uniform, one host on a slower link, or racks joined by thin
// uplinks, or hosts apart with no shaping at all. It runs the same script as
// scripts/netns-topo.sh (embedded here), so a network a test builds is the network a person
// builds by hand. It is the one place tests get namespace hosts from: ForTest builds a network
// for a test, and RunRanks runs the test binary as the ranks of a job on its hosts.
//
// What it must never do: touch the caller's own network namespace (every switch lives in a
// namespace of the network), leave namespaces behind after Down, or pretend to build a network
// when it cannot (not root, no iproute2): that is an error, and in a test a skip that CI turns
// into a failure.
package netns
