//go:build linux

package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport/shm"
)

// shmJob returns the endpoints of a job of size ranks connected pairwise by shared-memory
// pipes with the default ring (their doorbell links Unix sockets), over which payloads of
// opts.LendMin bytes or more are lent to RecvBorrow in place.
func shmJob(t testing.TB, size int, opts StreamOptions) []Endpoint {
	t.Helper()
	return pipeJob(t, size, opts, true)
}

// pipeJob is shmJob; with lend false the endpoints do not lend and see the pipes only as
// byte streams, which they read through a read buffer and copy out of.
func pipeJob(t testing.TB, size int, opts StreamOptions, lend bool) []Endpoint {
	t.Helper()
	eps, _ := pipeJobLinks(t, size, opts, lend)
	return eps
}

// pipeJobLinks is pipeJob that also returns each pipe's doorbell link, by (from, to): closing
// rank r's links is what the kernel does when r's process dies.
func pipeJobLinks(t testing.TB, size int, opts StreamOptions, lend bool) ([]Endpoint, map[[2]int]net.Conn) {
	t.Helper()
	segs := map[[2]int]*shm.Segment{} // by (lower rank, higher rank): the creator's segment
	links := map[[2]int]net.Conn{}
	eps := streamJob(t, "unix", size, opts, func(from, to int, link net.Conn) io.ReadWriteCloser {
		links[[2]int{from, to}] = link
		o := shm.Options{Dir: t.TempDir(), SingleCopyMin: -1}
		var seg *shm.Segment
		var err error
		if from < to {
			seg, err = shm.Create(o)
			segs[[2]int{from, to}] = seg
		} else {
			created := segs[[2]int{to, from}]
			o.Dir = filepath.Dir(created.Path())
			if seg, err = shm.Open(created.Name(), o); err == nil {
				err = seg.Unlink()
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := seg.Pipe(link)
		if err != nil {
			t.Fatal(err)
		}
		if !lend {
			return struct{ io.ReadWriteCloser }{p}
		}
		return p
	})
	return eps, links
}

// TestShmRecvBorrowLent receives messages of odd sizes, up to more than the ring, through
// RecvBorrow over shared-memory pipes, queued first and with the receiver waiting first, with
// receivers sleeping or polling, lending from 1 byte and from the default size on: every
// uncompressed payload from the smallest lent to half the ring is lent in place, the others
// copied, and all arrive whole.
func TestShmRecvBorrowLent(t *testing.T) {
	const lendMax = shm.DefaultRingSize / 2
	sizes := []int{0, 1, 7, 13, 4093, 65537, DefaultLendMin - 1, 300007, lendMax, lendMax + 8, 3<<20 + 5}
	for _, lendMin := range []int{1, 0} {
		for _, poll := range []time.Duration{0, 5 * time.Millisecond} {
			for _, codec := range []Codec{CodecNone, CodecS2} {
				t.Run(fmt.Sprintf("lendMin=%d/poll=%v/%v", lendMin, poll, codec), func(t *testing.T) {
					testRecvBorrowLent(t, sizes, lendMin, poll, codec)
				})
			}
		}
	}
}

func testRecvBorrowLent(t *testing.T, sizes []int, lendMin int, poll time.Duration, codec Codec) {
	const lendMax = shm.DefaultRingSize / 2
	opts := DefaultStreamOptions()
	opts.Poll, opts.LendMin = poll, lendMin
	if lendMin == 0 {
		lendMin = DefaultLendMin
	}
	eps := shmJob(t, 2, opts)
	se := eps[1].(*streamEndpoint)
	for i, n := range sizes {
		want := payloadOf(n, uint64(i))
		h := Header{Channel: chanUser, Codec: codec, Seq: uint64(i), Op: 7, Segment: uint32(i)}
		for _, waitFirst := range []bool{false, true} {
			before := se.lent.Load()
			borrowRoundTrip(t, eps, h, want, waitFirst)
			// A payload is lent when its receiver waits for it; one that arrives first is
			// copied out, unless the receiver is there before the reader.
			lendable := codec == CodecNone && n > 0 && n >= lendMin && n <= lendMax
			got := se.lent.Load() - before
			if (waitFirst && lendable && got != 1) || (!lendable && got != 0) || got > 1 {
				t.Fatalf("size %d, receiver first %v: %d payloads lent", n, waitFirst, got)
			}
		}
	}
}

// TestShmBorrowHeldWhileWriting holds a payload lent from the ring while the peer keeps
// sending: the peer fills the rest of the ring and then waits, the lent bytes do not change
// until they are given back, and every message after them arrives whole, received with Recv
// and RecvBorrow in turn.
func TestShmBorrowHeldWhileWriting(t *testing.T) {
	eps := shmJob(t, 2, DefaultStreamOptions())
	br := eps[1].(Borrower)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const count, size = 40, 256<<10 + 3
	send := func(i int) error {
		return eps[0].Send(ctx, 1, Header{Channel: chanUser, Seq: uint64(i)}, payloadOf(size, uint64(i)))
	}
	held, err := borrowWaiting(t, eps, chanUser, func() error { return send(0) })
	if err != nil {
		t.Fatal(err)
	}
	if n := eps[1].(*streamEndpoint).lent.Load(); n != 1 {
		t.Fatalf("%d payloads lent, want the first", n)
	}
	sent := make(chan int, count)
	errc := make(chan error, 1)
	go func() {
		for i := 1; i < count; i++ {
			if err := send(i); err != nil {
				errc <- err
				return
			}
			sent <- i
		}
		errc <- nil
	}()
	// The sender fills the ring behind the held bytes, then waits for them.
	fill := shm.DefaultRingSize/(size+FrameHeaderSize) - 1
	for last := 0; last < fill; {
		select {
		case last = <-sent:
		case <-time.After(30 * time.Second):
			t.Fatalf("the sender stopped after %d messages while one was held, want %d", last, fill)
		}
	}
	if !bytes.Equal(held, payloadOf(size, 0)) {
		t.Fatal("the held payload changed while the peer kept writing")
	}
	br.ReleaseBorrowed(0, chanUser)
	buf := make([]byte, size)
	for i := 1; i < count; i++ {
		var got []byte
		if i%2 == 0 {
			_, p, err := br.RecvBorrow(ctx, 0, chanUser)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			got = bytes.Clone(p)
			br.ReleaseBorrowed(0, chanUser)
		} else {
			n, err := eps[1].Recv(ctx, 0, Header{Channel: chanUser, Seq: uint64(i)}, buf)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			got = buf[:n]
		}
		if !bytes.Equal(got, payloadOf(size, uint64(i))) {
			t.Fatalf("message %d differs", i)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestShmBorrowPeerGoneAndClose: a borrowed payload stays readable when the peer goes away and
// when this endpoint closes while it is held; the next receive fails naming the peer, at once.
func TestShmBorrowPeerGoneAndClose(t *testing.T) {
	eps := shmJob(t, 2, DefaultStreamOptions())
	br := eps[1].(Borrower)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = DefaultLendMin + 3
	send := func(i int) error {
		return eps[0].Send(ctx, 1, Header{Channel: chanUser + Channel(i)}, payloadOf(size, uint64(i)))
	}
	p0, err := borrowWaiting(t, eps, chanUser, func() error { return send(0) })
	if err != nil {
		t.Fatal(err)
	}
	if err := send(1); err != nil {
		t.Fatal(err)
	}
	if n := eps[1].(*streamEndpoint).lent.Load(); n != 1 {
		t.Fatalf("%d payloads lent, want the first", n)
	}
	eps[0].Close() // the peer goes away while its bytes are held
	if !bytes.Equal(p0, payloadOf(size, 0)) {
		t.Fatal("the held payload changed when the peer closed")
	}
	// The second message was queued before the peer went; it is still delivered.
	_, p1, err := br.RecvBorrow(ctx, 0, chanUser+1)
	if err != nil || !bytes.Equal(p1, payloadOf(size, 1)) {
		t.Fatalf("queued message after the peer closed: %v", err)
	}
	_, _, err = br.RecvBorrow(ctx, 0, chanUser+2)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 0 || pe.Rank != 1 {
		t.Fatalf("receiving after the peer closed: %v, want an error naming rank 0", err)
	}
	eps[1].Close() // while p0 and p1 are held
	if !bytes.Equal(p0, payloadOf(size, 0)) || !bytes.Equal(p1, payloadOf(size, 1)) {
		t.Fatal("held payloads changed when the endpoint closed")
	}
	br.ReleaseBorrowed(0, chanUser)
	br.ReleaseBorrowed(0, chanUser+1)
}

// TestShmBorrowPeerDies: the peer's process dies (its doorbell link closes, the pipe is never
// closed) while a payload lent from its ring is held: the payload stays readable, and the next
// receive from it fails at once with an error naming it, instead of waiting for bytes that will
// never come.
func TestShmBorrowPeerDies(t *testing.T) {
	eps, links := pipeJobLinks(t, 2, DefaultStreamOptions(), true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = DefaultLendMin + 5
	held, err := borrowWaiting(t, eps, chanUser, func() error {
		return eps[0].Send(ctx, 1, Header{Channel: chanUser}, payloadOf(size, 9))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := eps[1].(*streamEndpoint).lent.Load(); n != 1 {
		t.Fatalf("%d payloads lent, want 1", n)
	}
	links[[2]int{0, 1}].Close()
	_, _, err = eps[1].(Borrower).RecvBorrow(ctx, 0, chanUser+1)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 0 || pe.Rank != 1 {
		t.Fatalf("receiving from a dead peer: %v, want an error naming rank 0", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the receive waited for the test's timeout instead of failing")
	}
	if !bytes.Equal(held, payloadOf(size, 9)) {
		t.Fatal("the held payload changed when the peer died")
	}
	eps[1].(Borrower).ReleaseBorrowed(0, chanUser)
}

// TestShmQueuedLendEvicted: a payload lent to a RecvBorrow that gave up before it arrived stays
// queued in the ring; when the peer then sends more than the ring holds on another channel,
// the endpoint copies the queued payload out instead of waiting for a receiver, and it is
// still delivered whole afterwards.
func TestShmQueuedLendEvicted(t *testing.T) {
	eps := shmJob(t, 2, DefaultStreamOptions())
	se := eps[1].(*streamEndpoint)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = 300007
	// A RecvBorrow that is posted when the payload arrives and gone when it is queued, as one
	// cancelled while the reader waited for the payload's last bytes.
	p := se.peers[0].Load()
	p.mu.Lock()
	w := &p.inbox(chanUser).w
	w.state, w.matchAny, w.borrow, w.want = wPosted, true, true, Header{Channel: chanUser}
	p.mu.Unlock()
	if err := eps[0].Send(ctx, 1, Header{Channel: chanUser}, payloadOf(size, 0)); err != nil {
		t.Fatal(err)
	}
	<-w.wake // the reader queued the message and let the waiter go
	if n := se.lent.Load(); n != 1 {
		t.Fatalf("%d payloads lent, want 1", n)
	}
	const count = 3 * shm.DefaultRingSize / size
	go func() {
		for i := range count {
			if eps[0].Send(ctx, 1, Header{Channel: chanUser + 1}, payloadOf(size, uint64(i+1))) != nil {
				return
			}
		}
	}()
	buf := make([]byte, size)
	for i := range count {
		if _, err := eps[1].Recv(ctx, 0, Header{Channel: chanUser + 1}, buf); err != nil {
			t.Fatalf("message %d behind the queued lend: %v", i, err)
		}
		if !bytes.Equal(buf, payloadOf(size, uint64(i+1))) {
			t.Fatalf("message %d differs", i)
		}
	}
	_, got, err := eps[1].(Borrower).RecvBorrow(ctx, 0, chanUser)
	if err != nil || !bytes.Equal(got, payloadOf(size, 0)) {
		t.Fatalf("the queued payload: %v", err)
	}
	eps[1].(Borrower).ReleaseBorrowed(0, chanUser)
}

// borrowWaiting posts a RecvBorrow at rank 1 for rank 0's next message on ch, then calls send,
// so that the payload arrives while the receiver waits, and returns what it borrowed.
func borrowWaiting(t *testing.T, eps []Endpoint, ch Channel, send func() error) ([]byte, error) {
	t.Helper()
	type result struct {
		p   []byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		_, p, err := eps[1].(Borrower).RecvBorrow(context.Background(), 0, ch)
		res <- result{p, err}
	}()
	waitPosted(t, eps[1], 0, ch)
	if err := send(); err != nil {
		return nil, err
	}
	r := <-res
	return r.p, r.err
}

// BenchmarkShmBorrowReduce sends messages from one rank to another over a shared-memory pipe
// and adds each received payload into a buffer, as a collective's receive-and-reduce step
// does: with the payload lent from the ring ("lent"), and from a pipe the endpoint cannot
// borrow from, which copies it out into a pooled buffer first ("copied"). "ahead": the sender
// sends as fast as it can, so the receiver mostly finds its message queued (copied out in
// both modes); "paced": the sender sends the next message once the receiver waits for it, the
// case where a payload is lent. Besides the wall time it reports the process's CPU time per
// message (both ranks are in this process).
func BenchmarkShmBorrowReduce(b *testing.B) {
	for _, pace := range []string{"paced", "ahead"} {
		for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
			for _, lend := range []bool{true, false} {
				name := map[bool]string{true: "lent", false: "copied"}[lend]
				b.Run(fmt.Sprintf("%s/%dKiB/%s", pace, size>>10, name), func(b *testing.B) {
					benchBorrowReduce(b, size, lend, pace == "paced")
				})
			}
		}
	}
}

func benchBorrowReduce(b *testing.B, size int, lend, paced bool) {
	opts := DefaultStreamOptions()
	opts.Checksum, opts.LendMin = false, 1
	eps := pipeJob(b, 2, opts, lend)
	br := eps[1].(Borrower)
	ctx := context.Background()
	src := payloadOf(size, 1)
	acc := make([]uint64, size/8)
	next := make(chan struct{}, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if paced {
				<-next
			}
			if eps[0].Send(ctx, 1, Header{Channel: chanUser}, src) != nil {
				return
			}
		}
	}()
	b.SetBytes(int64(size))
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if paced {
			next <- struct{}{}
		}
		_, p, err := br.RecvBorrow(ctx, 0, chanUser)
		if err != nil {
			b.Fatal(err)
		}
		for j := range acc {
			acc[j] += binary.LittleEndian.Uint64(p[8*j:])
		}
		br.ReleaseBorrowed(0, chanUser)
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time this process has used, user and system, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
