package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelayedWindows(t *testing.T) {
	eps := NewMemJob(2)
	defer eps[0].Close()
	defer eps[1].Close()
	epoch := time.Unix(1000, 0)
	now := epoch
	// untimed stands for a runtime's control channel: Delayed knows no channel's meaning.
	const untimed Channel = chanUser + 1
	d := NewDelayed(eps[0], time.Millisecond, []DelayWindow{{From: 2 * time.Second, To: 3 * time.Second}, {From: 5 * time.Second, To: 6 * time.Second}}, []Channel{untimed})
	d.now = func() time.Time { return now }
	ctx := context.Background()

	// Messages on the untimed channel do not start the clock; the first other message does.
	if err := d.Send(ctx, 1, Header{Channel: untimed}, []byte("c")); err != nil {
		t.Fatal(err)
	}
	if d.epoch.Load() != 0 {
		t.Fatal("a message on an untimed channel set the epoch")
	}
	steps := []struct {
		at      time.Duration
		delayed bool
	}{
		{0, false}, // sets the epoch
		{1999 * time.Millisecond, false},
		{2 * time.Second, true},
		{2999 * time.Millisecond, true},
		{3 * time.Second, false},
		{5500 * time.Millisecond, true},
		{6 * time.Second, false},
	}
	var buf [8]byte
	for i, st := range steps {
		now = epoch.Add(st.at)
		before := d.DelayedSends()
		if got := d.DelayAt(now); (got > 0) != st.delayed && i > 0 {
			t.Fatalf("at %v: DelayAt = %v, want delayed=%v", st.at, got, st.delayed)
		}
		h := Header{Channel: chanFirst, Seq: uint64(i)}
		if err := d.Send(ctx, 1, h, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if got := d.DelayedSends() - before; (got == 1) != st.delayed {
			t.Fatalf("at %v: %d sends delayed, want delayed=%v", st.at, got, st.delayed)
		}
		if i == 0 && d.epoch.Load() != epoch.UnixNano() {
			t.Fatal("the first data message did not set the epoch")
		}
		if i == 0 {
			if _, err := eps[1].Recv(ctx, 0, Header{Channel: untimed}, buf[:]); err != nil {
				t.Fatal(err)
			}
		}
		n, err := eps[1].Recv(ctx, 0, h, buf[:])
		if err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("message %d arrived as %v (n=%d, err %v)", i, buf[:n], n, err)
		}
	}
}

func TestDelayedSendHonoursContext(t *testing.T) {
	eps := NewMemJob(2)
	defer eps[0].Close()
	defer eps[1].Close()
	d := NewDelayed(eps[0], time.Hour, []DelayWindow{{From: 0, To: time.Hour}}, nil)
	d.Start(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := d.Send(ctx, 1, Header{Channel: chanFirst}, []byte("x"))
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want a PeerError for peer 1 wrapping context.Canceled", err)
	}
}

// liveEndpoint is an endpoint with heartbeats, as the p2p transport's.
type liveEndpoint struct {
	Endpoint
	act Activity
}

func (l *liveEndpoint) Activity() *Activity     { return &l.act }
func (l *liveEndpoint) Peer(peer int) PeerState { return PeerState{} }

// The heartbeats of a straggler's endpoint stay reachable through its delays, so that its
// stall reports still say what each peer last did.
func TestLivenessOfSeesThroughTheDelays(t *testing.T) {
	eps := NewMemJob(2)
	defer eps[0].Close()
	defer eps[1].Close()
	live := &liveEndpoint{Endpoint: eps[0]}
	cases := []struct {
		name string
		ep   Endpoint
		want Liveness
	}{
		{"plain", eps[0], nil},
		{"live", live, live},
		{"delayed live", NewDelayed(live, time.Millisecond, nil, nil), live},
		{"delayed twice", NewDelayed(NewDelayed(live, time.Millisecond, nil, nil), time.Millisecond, nil, nil), live},
		{"delayed plain", NewDelayed(eps[0], time.Millisecond, nil, nil), nil},
	}
	for _, tc := range cases {
		got, ok := LivenessOf(tc.ep)
		if ok != (tc.want != nil) || got != tc.want {
			t.Errorf("%s: LivenessOf = %v, %v; want %v", tc.name, got, ok, tc.want)
		}
	}
}

// A straggler's endpoint still lends received payloads (its delays touch sends only), found
// through As, and hides the host's arena, which would bypass its delayed sends.
func TestDelayedBorrowAndArena(t *testing.T) {
	eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
	d := NewDelayed(eps[1], time.Millisecond, nil, nil)
	if _, ok := d.Endpoint.(Borrower); !ok {
		t.Fatal("the stream endpoint does not lend")
	}
	br, ok := As[Borrower](NewDelayed(d, time.Millisecond, nil, nil))
	if !ok || br != eps[1].(Borrower) {
		t.Fatalf("As[Borrower] through two delays = %v, %v; want the stream endpoint", br, ok)
	}
	ctx := context.Background()
	if err := eps[0].Send(ctx, 1, Header{Channel: chanUser}, []byte("lent")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := br.RecvBorrow(ctx, 0, chanUser); err != nil || string(p) != "lent" {
		t.Fatalf("RecvBorrow through the delays: %q, %v", p, err)
	}
	br.ReleaseBorrowed(0, chanUser)

	arena := NewMemJobArena(2, 1<<16)
	defer CloseAll(arena)
	if HostArena(arena[0]) == nil {
		t.Fatal("the in-process job has no arena")
	}
	if a := HostArena(NewDelayed(arena[0], time.Millisecond, nil, nil)); a != nil {
		t.Fatalf("HostArena through the delays = %v, want nil", a)
	}
}
