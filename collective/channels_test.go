package collective

import (
	"testing"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// A Comm's own channels lie below the service layer's, so that no service ever reads a
// collective's message, and its sub-communicators' above them.
func TestCommChannelsOutsideTheServiceLayer(t *testing.T) {
	for _, ch := range []transport.Channel{chanCollective, chanAbort, chanP2P} {
		if ch >= service.FirstChannel {
			t.Errorf("channel %d of the Comm is in the service layer's range [%d, %d)", ch, service.FirstChannel, service.EndChannel)
		}
	}
	if chanSubComm < service.EndChannel {
		t.Errorf("sub-communicators start at channel %d, inside the service layer's range", chanSubComm)
	}
}
