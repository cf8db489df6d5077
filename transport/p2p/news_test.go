package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// frozenEnv, when set, is the rendezvous of a job whose last rank the test binary runs as a
// child (frozenChild); frozenSizeEnv is the job's size.
const (
	frozenEnv     = "HETSYNC_P2P_FROZEN"
	frozenSizeEnv = "HETSYNC_P2P_FROZEN_SIZE"
)

// newsPeerTimeout and newsJoinTimeout are the limits of TestFailureNewsReachesUnlinkedRank's
// job: a dial to a stopped rank ends at the join timeout, far past the peer timeout.
const (
	newsPeerTimeout = 2 * time.Second
	newsJoinTimeout = 40 * time.Second
)

// frozenChild joins as the last rank of the job at addr, links to nobody, says "ready" and
// waits (for the test to stop it, then kill it).
func frozenChild(addr, secret string) int {
	size, _ := strconv.Atoi(os.Getenv(frozenSizeEnv))
	ep, err := Join(context.Background(), Config{Rank: size - 1, Size: size, Rendezvous: addr, Secret: secret,
		DataPath: DataPathTCP, Security: SecurityNone, JoinTimeout: newsJoinTimeout, PeerTimeout: newsPeerTimeout, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "frozen child:", err)
		return 3
	}
	defer ep.Close()
	fmt.Print("ready\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // until stopped and killed
	return 0
}

// A rank frozen (SIGSTOP) in a job too large for all-pairs heartbeats is failed by the ranks
// that watch it, and the news reaches a rank that neither watches it nor holds a data link to
// it: that rank's first Recv from it (a dial that the stopped rank's socket accepts and never
// answers, which alone would wait out the join timeout) fails naming it, told by another rank.
func TestFailureNewsReachesUnlinkedRank(t *testing.T) {
	const size = allPairsMax + 2
	victim := size - 1
	waiter := -1
	for r := 1; r < victim; r++ {
		if !slices.Contains(livenessPeers(victim, size), r) {
			waiter = r
			break
		}
	}
	base := Config{Size: size, Secret: "failure news " + t.Name(), DataPath: DataPathTCP, Security: SecurityNone,
		JoinTimeout: newsJoinTimeout, PeerTimeout: newsPeerTimeout, Logger: quiet}
	addr, res0 := startRank0(t, base)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), frozenEnv+"="+addr, "HETSYNC_P2P_CHILD_SECRET="+base.Secret, frozenSizeEnv+"="+strconv.Itoa(size))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	chans := []<-chan result{res0}
	for r := 1; r < victim; r++ {
		chans = append(chans, startRank(base, r, addr))
	}
	eps := make([]transport.Endpoint, victim)
	t.Cleanup(func() { closeAll(eps) })
	for r, c := range chans {
		res := <-c
		if res.err != nil {
			t.Fatalf("rank %d: %v (rank %d: %s)", r, res.err, victim, stderr.String())
		}
		eps[r] = res.ep
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("rank %d: %q, %v: %s", victim, line, err, stderr.String())
	}
	// Frozen once its watchers hear it, mid-job: not a rank still finishing its join. They
	// link to it too, as the ranks whose collectives talk to it would.
	for _, r := range livenessPeers(victim, size) {
		ctx, cancel := context.WithTimeout(context.Background(), newsJoinTimeout)
		err := eps[r].Send(ctx, victim, transport.Header{Channel: testChannel}, nil)
		cancel()
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		hb := eps[r].(*endpoint).hb
		for deadline := time.Now().Add(newsJoinTimeout); !heardFrom(hb, victim); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d never heard rank %d's heartbeats", r, victim)
			}
		}
	}
	if linksOf(eps[waiter])[victim] != nil || heardFrom(eps[waiter].(*endpoint).hb, victim) {
		t.Fatalf("rank %d holds a link to rank %d, or watches it: the test needs a rank that does neither", waiter, victim)
	}
	if err := stopAndWait(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*newsJoinTimeout)
	defer cancel()
	_, err = eps[waiter].Recv(ctx, victim, transport.Header{Channel: testChannel}, make([]byte, 8))
	took := time.Since(start)
	var told *transport.PeerReportedError
	if !errors.As(err, &told) || told.Rank != waiter || told.Peer != victim || told.Exited ||
		!slices.Contains(livenessPeers(told.By, size), waiter) {
		t.Fatalf("rank %d's Recv from the stopped rank %d after %v: %v; want a *PeerReportedError naming it, from a rank that watches rank %d",
			waiter, victim, took, err, waiter)
	}
	t.Logf("rank %d told in %v (peer timeout %v, a dial's bound %v): %v", waiter, took, newsPeerTimeout, newsJoinTimeout, err)
	// Every rank knows: the news went round the job.
	for r, ep := range eps {
		live, _ := transport.LivenessOf(ep)
		for deadline := time.Now().Add(newsJoinTimeout); live.Peer(victim).Failed == nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d never failed the stopped rank %d", r, victim)
			}
		}
	}
}

// heardFrom says whether hb has had a heartbeat from peer.
func heardFrom(hb *heartbeats, peer int) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.peers[peer].heard
}

// livenessPeers watches every rank of a small job, and in a larger one a set that is symmetric,
// of O(log p) peers, and connected within 2·log2 p hops: the news of a failure reaches every
// rank in few hops.
func TestLivenessPeersCoverEveryRank(t *testing.T) {
	for _, size := range []int{2, 3, allPairsMax, allPairsMax + 1, allPairsMax + 2, 100, 128, 1000, 4097} {
		logp := bits.Len(uint(size - 1))
		watch := make([][]int, size)
		for r := range size {
			watch[r] = livenessPeers(r, size)
			if size <= allPairsMax && len(watch[r]) != size-1 {
				t.Fatalf("size %d: rank %d watches %d peers, want all %d", size, r, len(watch[r]), size-1)
			}
			if size > allPairsMax && len(watch[r]) > logp+2 {
				t.Fatalf("size %d: rank %d watches %d peers: %v", size, r, len(watch[r]), watch[r])
			}
		}
		for r := range size {
			for _, q := range watch[r] {
				if q == r || !slices.Contains(watch[q], r) {
					t.Fatalf("size %d: rank %d watches rank %d, which does not watch it back", size, r, q)
				}
			}
		}
		hops := make([]int, size)
		for i := range hops {
			hops[i] = -1
		}
		hops[0] = 0
		for queue := []int{0}; len(queue) > 0; queue = queue[1:] {
			for _, q := range watch[queue[0]] {
				if hops[q] < 0 {
					hops[q] = hops[queue[0]] + 1
					queue = append(queue, q)
				}
			}
		}
		for r, h := range hops {
			if h < 0 || h > 2*logp {
				t.Fatalf("size %d: rank %d is %d hops from rank 0 (-1: never), want at most %d", size, r, h, 2*logp)
			}
		}
	}
}
