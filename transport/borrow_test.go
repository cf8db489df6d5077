package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestStreamRecvBorrow receives messages of every size and codec both ways round: queued before
// RecvBorrow is called, and with RecvBorrow already waiting when they arrive.
func TestStreamRecvBorrow(t *testing.T) {
	sizes := []int{0, 1, 7, 4096, 300000}
	for _, kind := range streamKinds {
		for _, codec := range []Codec{CodecNone, CodecS2} {
			t.Run(kind+"/"+codec.String(), func(t *testing.T) {
				eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
				br := eps[1].(Borrower)
				ctx := context.Background()
				for i, n := range sizes {
					want := payloadOf(n, uint64(i))
					h := Header{Channel: chanUser, Codec: codec, Seq: uint64(i), Op: 7, Segment: uint32(i)}
					for _, waitFirst := range []bool{false, true} {
						borrowRoundTrip(t, eps, h, want, waitFirst)
					}
				}
				// Borrowing on one channel leaves the others alone.
				if err := eps[0].Send(ctx, 1, Header{Channel: chanSecond}, []byte("control")); err != nil {
					t.Fatal(err)
				}
				if err := eps[0].Send(ctx, 1, Header{Channel: chanUser}, []byte("user")); err != nil {
					t.Fatal(err)
				}
				_, p, err := br.RecvBorrow(ctx, 0, chanUser)
				if err != nil || string(p) != "user" {
					t.Fatalf("borrow on the user channel: %q, %v", p, err)
				}
				buf := make([]byte, 16)
				n, err := eps[1].Recv(ctx, 0, Header{Channel: chanSecond}, buf)
				if err != nil || string(buf[:n]) != "control" {
					t.Fatalf("recv on the control channel: %q, %v", buf[:n], err)
				}
				br.ReleaseBorrowed(0, chanUser)
			})
		}
	}
}

func TestStreamRecvBorrowErrors(t *testing.T) {
	eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
	br := eps[1].(Borrower)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := br.RecvBorrow(ctx, 0, chanUser); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RecvBorrow with nothing sent: %v, want a deadline error", err)
	}
	var pe *PeerError
	if _, _, err := br.RecvBorrow(context.Background(), 5, chanUser); !errors.As(err, &pe) {
		t.Fatalf("RecvBorrow from rank 5 of 2: %v, want a *PeerError", err)
	}
	// Messages to self are lent too.
	self := eps[0].(Borrower)
	if err := eps[0].Send(context.Background(), 0, Header{Channel: chanUser}, []byte("me")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := self.RecvBorrow(context.Background(), 0, chanUser); err != nil || string(p) != "me" {
		t.Fatalf("self borrow: %q, %v", p, err)
	}
	self.ReleaseBorrowed(0, chanUser)
	// A closed endpoint fails a waiting borrower.
	done := make(chan error, 1)
	go func() {
		_, _, err := br.RecvBorrow(context.Background(), 0, chanFirst)
		done <- err
	}()
	eps[0].Close()
	if err := <-done; err == nil {
		t.Fatal("RecvBorrow returned no error after the peer closed")
	}
}

func TestStreamRecvBorrowSteadyStateAllocs(t *testing.T) {
	for _, kind := range []string{"tcp", "unix", "unix+poll"} {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
			br := eps[1].(Borrower)
			ctx := context.Background()
			msg := payloadOf(1<<20, 3)
			round := func() {
				if err := eps[0].Send(ctx, 1, Header{}, msg); err != nil {
					t.Fatal(err)
				}
				if _, p, err := br.RecvBorrow(ctx, 0, chanFirst); err != nil || len(p) != len(msg) {
					t.Fatalf("%d bytes, %v", len(p), err)
				}
				br.ReleaseBorrowed(0, chanFirst)
			}
			for i := 0; i < 20; i++ {
				round()
			}
			if a := testing.AllocsPerRun(100, round); a != 0 && !raceEnabled {
				t.Fatalf("%v allocations per message", a)
			}
		})
	}
}

// borrowRoundTrip sends want with header h from rank 0 to rank 1 and receives it with
// RecvBorrow: queued first, or with the receiver already waiting when waitFirst. It fails the
// test unless the message arrives whole.
func borrowRoundTrip(t *testing.T, eps []Endpoint, h Header, want []byte, waitFirst bool) {
	t.Helper()
	ctx := context.Background()
	br := eps[1].(Borrower)
	type result struct {
		h   Header
		p   []byte
		err error
	}
	res := make(chan result, 1)
	recv := func() {
		gh, p, err := br.RecvBorrow(ctx, 0, h.Channel)
		r := result{gh, bytes.Clone(p), err}
		br.ReleaseBorrowed(0, h.Channel)
		res <- r
	}
	if waitFirst {
		go recv()
		waitPosted(t, eps[1], 0, h.Channel)
	}
	if err := eps[0].Send(ctx, 1, h, want); err != nil {
		t.Fatal(err)
	}
	if !waitFirst {
		recv()
	}
	r := <-res
	if r.err != nil || r.h != h || !bytes.Equal(r.p, want) {
		t.Fatalf("%d bytes, receiver first %v: %v, header %v (want %v), payload whole: %v",
			len(want), waitFirst, r.err, r.h, h, bytes.Equal(r.p, want))
	}
}

// waitPosted waits until a receive from `from` on ch waits at ep, when ep is a stream
// endpoint; for others it only lets the receiver start.
func waitPosted(t *testing.T, ep Endpoint, from int, ch Channel) {
	t.Helper()
	se, ok := ep.(*streamEndpoint)
	if !ok {
		time.Sleep(time.Millisecond)
		return
	}
	p := se.peers[from].Load()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		p.mu.Lock()
		posted := p.inbox(ch).w.state != wIdle
		p.mu.Unlock()
		if posted {
			return
		}
	}
	t.Fatalf("no receive from rank %d on channel %d waits at rank %d", from, ch, ep.Rank())
}
