package p2p

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// leaverEnv makes the test binary rank 1 of TestPeerExitedIsNamed: it joins the job at the
// variable's address and exits 0 without closing its endpoint.
const leaverEnv = "HETSYNC_P2P_LEAVER"

func leaver(addr, secret string) int {
	_, err := Join(context.Background(), Config{Rank: 1, Size: 2, Rendezvous: addr, Secret: secret,
		DataPath: DataPathTCP, Security: SecurityNone, JoinTimeout: 30 * time.Second, PeerTimeout: 8 * time.Second, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leaver:", err)
		return 3
	}
	return 0 // no Close: the process just ends
}

// A peer of this host that exits without closing its endpoint is failed as exited within a
// few heartbeats, not as unresponsive after the peer timeout, and the next call to it says so.
func TestPeerExitedIsNamed(t *testing.T) {
	base := Config{Size: 2, Secret: "peer exited " + t.Name(), DataPath: DataPathTCP, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, PeerTimeout: 8 * time.Second, Logger: quiet}
	addr, res0 := startRank0(t, base)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), leaverEnv+"="+addr, "HETSYNC_P2P_CHILD_SECRET="+base.Secret)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r0 := <-res0
	if r0.err != nil {
		t.Fatalf("rank 0: %v (rank 1: %s)", r0.err, stderr.String())
	}
	defer r0.ep.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rank 1: %v: %s", err, stderr.String())
	}
	live, _ := transport.LivenessOf(r0.ep)
	deadline := time.Now().Add(time.Minute)
	for live.Peer(1).Failed == nil {
		if time.Now().After(deadline) {
			t.Fatal("rank 1 exited a minute ago and rank 0 has not failed it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var exited *transport.PeerExitedError
	if err := live.Peer(1).Failed; !errors.As(err, &exited) || exited.Rank != 0 || exited.Peer != 1 {
		t.Fatalf("rank 1 failed with %v, want a *PeerExitedError of rank 0 naming rank 1", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r0.ep.Recv(ctx, 1, transport.Header{Seq: 1}, make([]byte, 8))
	if err == nil || !strings.Contains(err.Error(), "rank 1 exited while this rank was still in the job") {
		t.Errorf("Recv from the departed rank: %v", err)
	}
}
