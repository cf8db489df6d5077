package p2p

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// A rendezvous port that another program holds: rank 0 says so, naming the address, and rank 1,
// stopped when the job is given up (as the launcher stops it once rank 0 has failed), says it
// was stopped after the time it actually waited, not that it gave up after its join timeout.
func TestRendezvousPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	base := Config{Size: 2, Secret: "taken-port-secret", Rendezvous: addr, Security: "none", DataPath: "tcp",
		JoinTimeout: time.Minute, Logger: quiet}
	ctx1, stop1 := context.WithCancelCause(context.Background())
	res1 := make(chan error, 1)
	go func() {
		cfg := base
		cfg.Rank = 1
		ep, err := Join(ctx1, cfg)
		if ep != nil {
			ep.Close()
		}
		res1 <- err
	}()
	cfg0 := base
	cfg0.Rank = 0
	ep, err0 := Join(context.Background(), cfg0)
	if ep != nil {
		ep.Close()
	}
	if err0 == nil || !strings.Contains(err0.Error(), "rank 0: the rendezvous address "+addr+": port") ||
		!strings.Contains(err0.Error(), "is already in use") {
		t.Errorf("rank 0: Join = %v, want the address named as in use", err0)
	}
	stop1(errors.New("the launcher stopped the job"))
	err1 := <-res1
	if err1 == nil || strings.Contains(err1.Error(), "gave up after") ||
		!strings.Contains(err1.Error(), "stopped after") || !strings.Contains(err1.Error(), "of a 1m0s join timeout, before rank 0 answered (the launcher stopped the job)") {
		t.Errorf("rank 1: Join = %v, want it stopped before its join timeout, saying why", err1)
	}
}
