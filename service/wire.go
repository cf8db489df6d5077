package service

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/transport"
)

// The channels the layer hands out: [FirstChannel, EndChannel). collective.Comm keeps the
// channels below for its collectives and point-to-point messages and those from EndChannel on
// for its sub-communicators.
const (
	FirstChannel transport.Channel = 16
	EndChannel   transport.Channel = 0x8000
)

// ChannelOf is the channel of the service called name: the same on every rank, whatever else
// a rank runs. Two names may share a channel; their frames then carry different tags and a
// frame of the one that reaches the other is an error naming both.
func ChannelOf(name string) transport.Channel {
	return FirstChannel + transport.Channel(uint32(hashOf(name))%uint32(EndChannel-FirstChannel))
}

// tagOf is the tag the frames of service name carry: other bits of the name's hash than those
// that chose its channel, so two names on one channel are told apart.
func tagOf(name string) uint16 { return uint16(hashOf(name) >> 48) }

// hashOf is the 64-bit FNV-1a hash of name.
func hashOf(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// Msg is one request, reply or one-way message. The layer carries it and never reads it: Op
// (an index into the service's operation names), Flags (4 bits), Arg, Aux and Body are the
// service's own.
type Msg struct {
	Op    uint8
	Flags uint8
	Arg   uint64
	Aux   uint32
	// Body is the payload. In what the layer delivers it is valid only as long as the
	// delivery says (until Serve returns, until a Reply is released).
	Body []byte
}

// MaxFlags bounds Msg.Flags: the flags share the header's op word with the tag, the kind and
// the operation.
const MaxFlags = 1<<4 - 1

// kind is what a frame is to the layer.
type kind uint8

const (
	kindRequest kind = 1 + iota // a client's request; the server replies
	kindPost                    // a one-way message, to a server (Service.Post) or a Mailbox
	kindReply                   // a server's answer to its client's request
	kindFail                    // a server's refusal of a request; Body is the reason
	kindBye                     // the client sends this server no more requests
	kindShut                    // the server answers this client no more
	kindByeAck                  // the server read the client's bye
)

func (k kind) String() string {
	switch k {
	case kindRequest:
		return "request"
	case kindPost:
		return "one-way message"
	case kindReply:
		return "reply"
	case kindFail:
		return "refusal"
	case kindBye:
		return "bye"
	case kindShut:
		return "shutdown notice"
	case kindByeAck:
		return "bye acknowledgement"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// ident is what frames and errors of one service on one rank are made of.
type ident struct {
	name string
	tag  uint16
	ch   transport.Channel
	ops  []string
	ep   transport.Endpoint
	rank int
}

func newIdent(ep transport.Endpoint, name string, ops []string) (ident, error) {
	if name == "" {
		return ident{}, fmt.Errorf("service: rank %d: a service needs a name", ep.Rank())
	}
	if len(ops) == 0 || len(ops) > 256 {
		return ident{}, fmt.Errorf("service %s: rank %d: %d operation names, want 1 to 256", name, ep.Rank(), len(ops))
	}
	return ident{name: name, tag: tagOf(name), ch: ChannelOf(name), ops: ops, ep: ep, rank: ep.Rank()}, nil
}

// opName names operation op of the service.
func (id *ident) opName(op uint8) string {
	if int(op) < len(id.ops) {
		return id.ops[op]
	}
	return fmt.Sprintf("op %d", op)
}

// header packs m as a frame of kind k: the op word holds the tag, the kind, the flags and the
// operation; Seq carries Arg and Segment Aux.
func (id *ident) header(k kind, m Msg) transport.Header {
	return transport.Header{Channel: id.ch, Seq: m.Arg, Segment: m.Aux,
		Op: uint32(id.tag)<<16 | uint32(k)<<12 | uint32(m.Flags&MaxFlags)<<8 | uint32(m.Op)}
}

// decode unpacks a frame received from peer, checking that it belongs to this service.
func (id *ident) decode(peer int, h transport.Header, body []byte) (kind, Msg, error) {
	if tag := uint16(h.Op >> 16); tag != id.tag {
		return 0, Msg{}, id.errorf(peer, "receive", "a frame of another service (tag %#04x, this service's is %#04x) arrived on channel %d: "+
			"the ranks run different services on it", tag, id.tag, id.ch)
	}
	k, m := unpack(h)
	m.Body = body
	return k, m, nil
}

// unpack is header's inverse, but for the tag.
func unpack(h transport.Header) (kind, Msg) {
	return kind(h.Op >> 12 & 0xf), Msg{Op: uint8(h.Op), Flags: uint8(h.Op>>8) & MaxFlags, Arg: h.Seq, Aux: h.Segment}
}

// send sends m to peer as a frame of kind k.
func (id *ident) send(ctx context.Context, to int, k kind, m Msg) error {
	if m.Flags > MaxFlags {
		return id.errorf(to, id.opName(m.Op), "flags %#x do not fit in 4 bits", m.Flags)
	}
	if err := id.ep.Send(ctx, to, id.header(k, m), m.Body); err != nil {
		what := k.String()
		if k < kindBye {
			what = id.opName(m.Op) + " " + what
		}
		return id.wrap(to, "send "+what, err)
	}
	return nil
}

// Inspect says whether h is a frame of the service called name that carries a client's
// request or one-way message, and which: for decorators and tests that watch a service's
// traffic on the wire.
func Inspect(name string, h transport.Header) (m Msg, request bool) {
	if h.Channel != ChannelOf(name) || uint16(h.Op>>16) != tagOf(name) {
		return Msg{}, false
	}
	k, m := unpack(h)
	return m, k == kindRequest || k == kindPost
}

// Error is a failure of a service on one rank: which service, which rank, which peer and what
// was being done (an operation's name, "receive", "close", ...).
type Error struct {
	Service    string
	Rank, Peer int
	Op         string
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("service %s: rank %d: %s with rank %d: %v", e.Service, e.Rank, e.Op, e.Peer, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func (id *ident) wrap(peer int, op string, err error) error {
	return &Error{Service: id.name, Rank: id.rank, Peer: peer, Op: op, Err: err}
}

func (id *ident) errorf(peer int, op, format string, args ...any) error {
	return id.wrap(peer, op, fmt.Errorf(format, args...))
}
