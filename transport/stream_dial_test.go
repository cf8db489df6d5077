package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// dialingJob is a job of size ranks over loopback TCP whose links open on first use: each
// rank listens, a lower rank dials a higher one and says its rank in 4 bytes, and a higher
// rank that needs a lower one waits until that one's connection is attached (the crossing of
// two dials is transport/p2p's business; here the lower rank always dials). refuse lists
// ranks whose listener is closed before anyone dials.
func dialingJob(t *testing.T, size int, refuse map[int]bool) []Endpoint {
	t.Helper()
	ls := make([]net.Listener, size)
	for r := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[r] = l
	}
	eps := make([]Endpoint, size)
	attached := make([][]chan struct{}, size) // attached[r][q]: closed when r attached q's dial
	var wg sync.WaitGroup
	for r := range size {
		attached[r] = make([]chan struct{}, size)
		for q := range attached[r] {
			attached[r][q] = make(chan struct{})
		}
		dial := func(ctx context.Context, peer int) (io.ReadWriteCloser, error) {
			if peer < r {
				select {
				case <-attached[r][peer]:
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", ls[peer].Addr().String())
			if err != nil {
				return nil, fmt.Errorf("rank %d's listener at %s: %w", peer, ls[peer].Addr(), err)
			}
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(r))
			if _, err := c.Write(b[:]); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		ep, err := NewDialingStreamEndpoint(r, size, nil, dial, DefaultStreamOptions())
		if err != nil {
			t.Fatal(err)
		}
		eps[r] = ep
	}
	for r, l := range ls {
		if refuse[r] {
			l.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				var b [4]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					c.Close()
					continue
				}
				from := int(binary.LittleEndian.Uint32(b[:]))
				if err := eps[r].(Attacher).Attach(from, c); err != nil {
					t.Errorf("rank %d: %v", r, err)
					c.Close()
					continue
				}
				close(attached[r][from])
			}
		}()
	}
	t.Cleanup(func() {
		CloseAll(eps)
		for _, l := range ls {
			l.Close()
		}
		wg.Wait()
	})
	return eps
}

// TestDialingStreamConnectsOnFirstUse runs a ring exchange (each rank sends to the next and
// receives from the previous) over endpoints that connect on first use, checks what arrives,
// and that each rank holds connections to its two neighbours only.
func TestDialingStreamConnectsOnFirstUse(t *testing.T) {
	for _, size := range []int{2, 3, 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			eps := dialingJob(t, size, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, ep := range eps {
				for q, up := range ep.(Linked).Linked() {
					if up {
						t.Fatalf("rank %d is linked to rank %d before any message", ep.Rank(), q)
					}
				}
			}
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r, ep := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next, prev := (r+1)%size, (r+size-1)%size
					h := Header{Channel: 3, Seq: 1, Op: 7}
					if err := ep.Send(ctx, next, h, payloadOf(1000+r, uint64(r))); err != nil {
						errs[r] = err
						return
					}
					buf := make([]byte, 4096)
					n, err := ep.Recv(ctx, prev, h, buf)
					if err == nil && !bytes.Equal(buf[:n], payloadOf(1000+prev, uint64(prev))) {
						err = fmt.Errorf("rank %d got a wrong message from rank %d", r, prev)
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r, ep := range eps {
				want := map[int]bool{(r + 1) % size: true, (r + size - 1) % size: true}
				for q, up := range ep.(Linked).Linked() {
					if up != want[q] {
						t.Errorf("rank %d linked to rank %d: %v, want %v", r, q, up, want[q])
					}
				}
			}
		})
	}
}

// TestDialingStreamUnreachablePeer checks that a peer whose dial fails fails the send that
// needed it, a receive waiting on it and every later call, each naming the peer and the dial's
// reason, and that a peer failed before it linked fails its receives.
func TestDialingStreamUnreachablePeer(t *testing.T) {
	eps := dialingJob(t, 3, map[int]bool{2: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := Header{Channel: 1, Seq: 1}
	err := eps[0].Send(ctx, 2, h, []byte("x"))
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 2 || pe.Rank != 0 || !strings.Contains(err.Error(), "rank 2's listener") {
		t.Fatalf("send to an unreachable rank: %v, want a PeerError from rank 0 naming rank 2 and its listener", err)
	}
	if _, err := eps[0].Recv(ctx, 2, h, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "rank 2's listener") {
		t.Fatalf("recv from an unreachable rank: %v, want the dial's error", err)
	}
	cause := errors.New("the peer stopped answering")
	eps[1].(PeerFailer).FailPeer(0, cause)
	if _, err := eps[1].Recv(ctx, 0, h, make([]byte, 8)); !errors.Is(err, cause) {
		t.Fatalf("recv from a peer failed before it linked: %v, want %v", err, cause)
	}
}
