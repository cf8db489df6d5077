package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// A rank whose endpoint closes is gone for its peers, as a process whose connections close:
// what it sent is still delivered, then their receives from it fail instead of waiting.
func TestMemPeerCloseFailsReceivesFromIt(t *testing.T) {
	for _, queued := range []int{0, 1, 3} {
		eps := NewMemJob(3)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range queued {
			if err := eps[2].Send(ctx, 0, Header{Seq: uint64(i)}, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		blocked := make(chan error, 1)
		go func() {
			buf := make([]byte, 1)
			for i := range queued {
				if n, err := eps[0].Recv(ctx, 2, Header{Seq: uint64(i)}, buf); err != nil || !bytes.Equal(buf[:n], []byte{byte(i)}) {
					blocked <- err
					return
				}
			}
			_, err := eps[0].Recv(ctx, 2, Header{Seq: uint64(queued)}, buf)
			blocked <- err
		}()
		eps[2].Close()
		err := <-blocked
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Peer != 2 || !errors.Is(err, errPeerClosed) {
			t.Fatalf("%d queued: receive from the closed rank 2 returned %v; want its %d messages, then a *PeerError naming it", queued, err, queued)
		}
		// Rank 1 is unaffected: a message from it still arrives.
		if err := eps[1].Send(ctx, 0, Header{Seq: 9}, []byte{9}); err != nil {
			t.Fatal(err)
		}
		if _, err := eps[0].Recv(ctx, 1, Header{Seq: 9}, make([]byte, 1)); err != nil {
			t.Fatalf("receive from the live rank 1 after rank 2 closed: %v", err)
		}
		for _, ep := range eps {
			ep.Close()
		}
	}
}
