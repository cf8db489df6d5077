// Package service is hetsync's request/reply layer over a transport.Endpoint: the parameter
// server, ESync's state service and the trainer's job control are services on it, so that
// none of them frames its own messages, runs its own readers or invents its own goodbye.
//
// A service is known by its name on every rank. The name decides its channel (ChannelOf) and
// a 16-bit tag that every frame of the service carries, so ranks agree on the channel by
// construction, in whatever order they start their services, and a frame that reaches the
// wrong service (two names on one channel) is an error naming both, never cross-talk.
//
// Two shapes share the wire format (wire.go):
//
//   - Service (Start): a server answers requests (Msg) from its clients through a Handler,
//     at once or later (a reply may be parked, as the parameter server's SSP gate does);
//     clients send requests and collect replies, at most one in flight per server. One reader
//     goroutine per peer serves the peer's requests and hands its replies over. Close is the
//     one shutdown: a rank says bye to its servers (each acknowledges it at once), waits
//     until its clients have said bye, tells the clients that never did, when its context
//     ends first, that it serves no more, and stops its readers; a request pending at a rank
//     that stops serving, or whose link fails, ends in an error naming the service, the peer
//     and the request. A reader stops once its peer can send nothing more (both byes are
//     acknowledged), so a peer that ends after its own Close is never taken for a failure.
//   - Mailbox: one-way messages that both sides expect in an order they both know (the job
//     control's barriers, broadcasts and gathers), with no reader goroutine: a rank receives
//     from a peer when its protocol says the message is due.
//
// Channels below FirstChannel belong to collective.Comm, channels from EndChannel on to its
// sub-communicators; the layer hands out the range between.
//
// This package must never interpret a service's messages (a Msg's Op, Flags, Arg, Aux and Body
// are the service's), never block a reader on another rank's progress beyond handing a reply
// to the caller that waits for it, and never allocate per message in steady state.
package service
