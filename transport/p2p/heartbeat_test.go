package p2p

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// A rank that sends no heartbeats (here: its heartbeats are off, as a frozen process's are
// silent) is failed by every peer: a pending Recv from it returns an *UnresponsiveError naming
// it (or a *PeerReportedError from the rank that failed it first), while the live peers keep
// each other. A peer never heard from is given the join timeout
// (a large job opens its streams slowly); one heard from and then silent, the peer timeout
// (the end-to-end SIGSTOP tests).
func TestSilentPeerFailsRecv(t *testing.T) {
	for _, size := range []int{2, 3, 5} {
		const timeout, join = time.Second, 4 * time.Second
		silent := size - 1
		eps := startJob(t, Config{Size: size, Secret: "hb " + t.Name(), Security: SecurityNone, DataPath: DataPathTCP, PeerTimeout: timeout, JoinTimeout: join}, func(r int, c *Config) {
			if r == silent {
				c.PeerTimeout = -1
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		buf := make([]byte, 8)
		_, err := eps[0].Recv(ctx, silent, transport.Header{Channel: testChannel}, buf)
		cancel()
		// Rank 0 fails it first-hand, or is told by a rank that did or was told in turn (the
		// news runs along the heartbeats): the first-hand verdict is the one to check.
		var told *transport.PeerReportedError
		for hops := 0; hops < size && errors.As(err, &told) && told.Peer == silent; hops++ {
			err = eps[told.By].(transport.Liveness).Peer(silent).Failed
		}
		var ue *transport.UnresponsiveError
		if !errors.As(err, &ue) || ue.Peer != silent {
			t.Fatalf("size %d: recv from the silent rank %d: %v, want an *UnresponsiveError naming it", size, silent, err)
		}
		// never heard from, it was given the join timeout, and the error says so
		if want := "(limit 4s, HETSYNC_JOIN_TIMEOUT)"; ue.Limit != join || !strings.Contains(err.Error(), want) {
			t.Errorf("size %d: %v: want the limit it was given, %s", size, err, want)
		}
		if took := time.Since(start); took > join+2*timeout {
			t.Errorf("size %d: the silent rank was failed after %v, limit %v", size, took, join)
		}
		for r := 0; r < silent; r++ {
			for p := 0; p < silent; p++ {
				if st := eps[r].(transport.Liveness).Peer(p); p != r && (st.Failed != nil || st.Heard.IsZero()) {
					t.Errorf("size %d: rank %d on live rank %d: %+v", size, r, p, st)
				}
			}
		}
		closeAll(eps)
	}
}

// Heartbeats carry what the sender's callers last did and measure the control path's round
// trip; a rank that closes says goodbye and is not failed afterwards, once its silence has
// passed the limit that fails a peer gone without one.
func TestHeartbeatsReportActivityAndGoodbye(t *testing.T) {
	// The join timeout is also the limit of a peer whose stream ended (a goodbye's does).
	const timeout, join = 800 * time.Millisecond, 5 * time.Second
	eps := startJob(t, Config{Size: 3, Secret: "hb " + t.Name(), Security: SecurityNone, DataPath: DataPathTCP, PeerTimeout: timeout, JoinTimeout: join}, nil)
	defer closeAll(eps)
	if got := eps[0].(*endpoint).DataPaths(); len(got) != 3 || got[0] != "" || got[1] != DataPathTCP || got[2] != DataPathTCP {
		t.Errorf("rank 0's data paths: %q, want tcp to both peers", got)
	}
	eps[1].(transport.Liveness).Activity().Start(42, 3, time.Now())
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := eps[0].(transport.Liveness).Peer(1)
		if st.Seq == 42 && st.Op == 3 && !st.Done && st.RTT > 0 && eps[0].(transport.Liveness).Peer(2).RTT > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 never heard rank 1's activity and round trip: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := eps[2].Close(); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !eps[0].(transport.Liveness).Peer(2).Left && time.Since(start) < 10*time.Second; {
		time.Sleep(50 * time.Millisecond)
	}
	// Wait, however loaded the host, until rank 0's monitor has judged rank 2 after its
	// silence passed its limit (silence and limit as the monitor counts them: less the time
	// rank 0 was starved; the join timeout for a peer whose stream ended): a peer silent that
	// long without a goodbye is failed by then.
	hb := eps[0].(*endpoint).hb
	pastLimit := func() bool {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		p, limit := hb.peers[2], hb.timeout
		if !p.heard {
			limit = hb.firstGrace
		}
		return hb.checked.Sub(p.Heard)-p.starved > limit
	}
	for deadline := time.Now().Add(2 * time.Minute); !pastLimit(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 0's monitor never judged rank 2 silent past its limit after its goodbye: %+v", eps[0].(transport.Liveness).Peer(2))
		}
	}
	if st := eps[0].(transport.Liveness).Peer(2); !st.Left || st.Failed != nil {
		t.Errorf("rank 0 on rank 2 after its Close: %+v, want it left and not failed", st)
	}
}
