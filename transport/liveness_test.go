package transport

import (
	"strings"
	"testing"
	"time"
)

// A silent peer on another host may be alive behind a link that is down: the error says it is
// unreachable and names the network beside a frozen or dead process. One on this host has
// its process's state from the kernel, and no link to blame.
func TestUnresponsiveErrorNamesTheLink(t *testing.T) {
	remote := (&UnresponsiveError{Rank: 0, Peer: 2, Silent: 9 * time.Second, Limit: 8 * time.Second}).Error()
	for _, want := range []string{"rank 0: rank 2 is unresponsive", "unreachable from this host", "frozen or dead", "the network between the hosts is down"} {
		if !strings.Contains(remote, want) {
			t.Errorf("peer on another host: %q does not say %q", remote, want)
		}
	}
	local := (&UnresponsiveError{Rank: 0, Peer: 1, Silent: 9 * time.Second, Limit: 8 * time.Second, State: "stopped (SIGSTOP or a tracer)"}).Error()
	if !strings.Contains(local, "its process is stopped (SIGSTOP or a tracer)") || strings.Contains(local, "network") {
		t.Errorf("peer on this host: %q", local)
	}
}
