package p2p

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// cmaChildEnv makes the test binary rank 1 of TestCMAPeerKilledMidTransfer.
const cmaChildEnv = "HETSYNC_P2P_CMA_CHILD"

const cmaMessage = 64<<20 + 3 // large enough that a copy takes a while, odd

func cmaPayload(i int) []byte {
	b := make([]byte, cmaMessage)
	for j := range b {
		b[j] = byte(j*7 + i)
	}
	return b
}

// TestCMAPeerKilledMidTransfer: rank 1 runs in a child process and sends 64 MiB messages to
// rank 0 over the cma path, one after the other; rank 0 kills it (SIGKILL) once the first has
// arrived, while the next is being copied out of its memory. Every message rank 0 received is
// intact, and its next Recv fails, within the test's minute, with an error naming rank 1 that
// wraps shm.ErrPeerGone.
func TestCMAPeerKilledMidTransfer(t *testing.T) {
	base := Config{Size: 2, Secret: "cma peer killed", DataPath: DataPathCMA, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	cmd, ep0 := startChildRank1(t, base, cmaChildEnv)
	if paths := ep0.(*endpoint).DataPaths(); paths[1] != DataPathCMA {
		t.Fatalf("rank 0's path to rank 1 is %q, want %q", paths[1], DataPathCMA)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	buf := make([]byte, cmaMessage)
	var err error
	for i := 0; err == nil; i++ {
		var h transport.Header
		var n int
		h, n, err = ep0.RecvAny(ctx, 1, testChannel, buf)
		if err != nil {
			break
		}
		if h.Seq != uint64(i) || n != cmaMessage || !bytes.Equal(buf, cmaPayload(i)) {
			t.Fatalf("message %d: seq %d, %d bytes, intact %v", i, h.Seq, n, bytes.Equal(buf[:n], cmaPayload(i)))
		}
		if i == 0 {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ctx.Err() != nil || !errors.Is(err, shm.ErrPeerGone) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("Recv from a peer killed mid-transfer: %v; want an error naming rank 1 that wraps shm.ErrPeerGone", err)
	}
	t.Log(err)
}

// startChildRank1 runs rank 0 of a two-rank job here and rank 1 in a child process, this test
// binary started with env set to rank 0's address. Both end with the test.
func startChildRank1(t *testing.T, base Config, env string) (*exec.Cmd, transport.Endpoint) {
	t.Helper()
	addr, res0 := startRank0(t, base)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+addr, "HETSYNC_P2P_CHILD_SECRET="+base.Secret)
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r0 := <-res0
	if r0.err != nil {
		t.Fatalf("rank 0: %v (child: %s)", r0.err, stderr.String())
	}
	t.Cleanup(func() { r0.ep.Close() })
	if err := linkEveryPeer(context.Background(), r0.ep); err != nil {
		t.Fatalf("rank 0: %v (child: %s)", err, stderr.String())
	}
	return cmd, r0.ep
}

// cmaChild is rank 1 of TestCMAPeerKilledMidTransfer: it sends messages until it is killed.
func cmaChild(addr, secret string) int {
	ep, err := Join(context.Background(), Config{Rank: 1, Size: 2, Rendezvous: addr, Secret: secret,
		DataPath: DataPathCMA, Security: SecurityNone, JoinTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	if err := linkEveryPeer(context.Background(), ep); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	for i := 0; ; i++ {
		if err := ep.Send(context.Background(), 0, transport.Header{Channel: testChannel, Seq: uint64(i)}, cmaPayload(i)); err != nil {
			return 0 // rank 0 closed first: the test does not wait for this process
		}
	}
}
