package p2p

import (
	"context"
	"errors"
	"fmt"
	"github.com/hetsync/hetsync/internal/procstat"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// leaverEnv makes the test binary rank 1 of TestPeerExitedIsNamed: it joins the job at the
// variable's address and exits 0 without closing its endpoint.
const leaverEnv = "HETSYNC_P2P_LEAVER"

// leaverSizeEnv, when set, is the job's size: the leaver is its last rank.
const leaverSizeEnv = "HETSYNC_P2P_LEAVER_SIZE"

func leaver(addr, secret string) int {
	size, _ := strconv.Atoi(os.Getenv(leaverSizeEnv))
	size = max(size, 2)
	ep, err := Join(context.Background(), Config{Rank: size - 1, Size: size, Rendezvous: addr, Secret: secret,
		DataPath: DataPathTCP, Security: SecurityNone, JoinTimeout: 30 * time.Second, PeerTimeout: 8 * time.Second, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leaver:", err)
		return 3
	}
	if err := linkEveryPeer(context.Background(), ep); err != nil {
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
	if err := linkEveryPeer(context.Background(), r0.ep); err != nil {
		t.Fatalf("rank 0: %v (rank 1: %s)", err, stderr.String())
	}
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

// A rank stopped (SIGSTOP) after it registered, while the others connect to it: its sockets
// still accept, so their dials end at their bound (the join timeout), and each error says that
// the rank is stopped rather than only "i/o timeout".
func TestJoinNamesStoppedPeer(t *testing.T) {
	base := Config{Size: 3, Secret: "stopped joiner " + t.Name(), DataPath: DataPathTCP, Security: SecurityNone,
		JoinTimeout: 3 * time.Second, Logger: quiet}
	var pid atomic.Int64
	stopped := make(chan error, 1)
	addr, res0 := startRank0With(t, base, hooks{registered: func(r int) {
		if r == 2 {
			stopped <- stopAndWait(int(pid.Load()))
		}
	}})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), leaverEnv+"="+addr, "HETSYNC_P2P_CHILD_SECRET="+base.Secret, leaverSizeEnv+"=3")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid.Store(int64(cmd.Process.Pid))
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	res1 := startRank(base, 1, addr)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, res := range []<-chan result{res0, res1} {
		got := <-res
		if got.err != nil {
			t.Fatalf("rank %d: %v", r, got.err)
		}
		defer got.ep.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = got.ep.Send(context.Background(), 2, transport.Header{Channel: testChannel}, nil)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		want := fmt.Sprintf("rank 2 (pid %d on this host) is stopped (SIGSTOP or a tracer)", cmd.Process.Pid)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d: tcp data connection to rank 2", r)) {
			t.Errorf("rank %d: %v; want it to name rank 2 and say %q", r, err, want)
		}
	}
}

// stopAndWait stops process pid and waits until the kernel says it is stopped.
func stopAndWait(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	for {
		st, _, err := procstat.Read(pid)
		if err != nil {
			return err
		}
		if st == 'T' {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}
