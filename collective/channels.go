package collective

import (
	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// The channels of a Comm on its endpoint. The service layer (package service) hands out the
// channels from service.FirstChannel to service.EndChannel; a Comm keeps those below for
// itself and those from service.EndChannel on for its sub-communicators.
const (
	chanCollective transport.Channel = 0 // the collectives
	// chanAbort carries why a rank gave up on a collective, sent before its abort notice.
	chanAbort transport.Channel = 5
	// chanP2P carries the point-to-point messages (Send/Recv): apart from the collectives,
	// so that a pending receive never takes a collective's message.
	chanP2P transport.Channel = 6
	// chanSubComm and every channel above it carry the messages of sub-communicators
	// (Comm.Split), two channels each (collectives, then point-to-point), agreed by their
	// members.
	chanSubComm = service.EndChannel
)
