// Package topology is what a job knows about its network: which ranks provably share a host,
// and the measured cost (latency α, time per byte β) of sending from every rank to every
// other. The collective package plans schedules from it (hierarchy, ring order, server
// placement, auto's simulator); the measurement itself runs over a transport.Endpoint.
//
// What it must never do: decide that two ranks share a host from a name alone, open
// connections of its own, or let ranks hold different matrices when they plan the same call.
package topology
