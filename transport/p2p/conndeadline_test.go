package p2p

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/lateconn"
)

// TestConnDeadlineStopAfterCancel: the context bounding the arena's exchange ends just before
// the exchange stops watching it; however late its handler moves the connection's deadline,
// the connection stays usable after stop (it used to keep the handler's past deadline).
func TestConnDeadlineStopAfterCancel(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := lateconn.New(a, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	stop := setConnDeadline(ctx, c)
	cancel()
	stop()
	<-c.PastSet()
	go io.Copy(io.Discard, b)
	if _, err := c.Write([]byte("after the exchange")); err != nil {
		t.Fatalf("write after stop: %v", err)
	}
}
