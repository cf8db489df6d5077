package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/internal/lateconn"
)

// streamKinds are the connections every stream test runs over; "+poll" makes receivers poll
// the socket (StreamOptions.Poll) and read their messages themselves.
var streamKinds = []string{"pipe", "unix", "tcp", "unix+poll", "tcp+poll"}

// kindOptions returns opts adjusted for kind: polling for the "+poll" kinds.
func kindOptions(kind string, opts StreamOptions) StreamOptions {
	if strings.HasSuffix(kind, "+poll") {
		opts.Poll = 5 * time.Millisecond
	}
	return opts
}

// connPair returns the two ends of a fresh duplex connection of the given kind.
func connPair(t testing.TB, kind string) (net.Conn, net.Conn) {
	t.Helper()
	kind = strings.TrimSuffix(kind, "+poll")
	if kind == "pipe" {
		return net.Pipe()
	}
	var ln net.Listener
	var err error
	switch kind {
	case "unix":
		ln, err = net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	case "tcp":
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	default:
		t.Fatalf("unknown connection kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c
}

// streamJob builds a full job of size ranks over connections of kind. wrap, when set, may
// replace the connection that rank `from` uses towards rank `to`.
func streamJob(t testing.TB, kind string, size int, opts StreamOptions,
	wrap func(from, to int, c net.Conn) io.ReadWriteCloser) []Endpoint {
	t.Helper()
	conns := make([][]io.ReadWriteCloser, size)
	for i := range conns {
		conns[i] = make([]io.ReadWriteCloser, size)
	}
	for i := 0; i < size; i++ {
		for j := i + 1; j < size; j++ {
			a, b := connPair(t, kind)
			conns[i][j], conns[j][i] = a, b
			if wrap != nil {
				conns[i][j] = wrap(i, j, a)
				conns[j][i] = wrap(j, i, b)
			}
		}
	}
	eps := make([]Endpoint, size)
	for r := range eps {
		ep, err := NewStreamEndpoint(r, size, conns[r], kindOptions(kind, opts))
		if err != nil {
			t.Fatal(err)
		}
		eps[r] = ep
		t.Cleanup(func() { ep.Close() })
	}
	return eps
}

func payloadOf(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestStreamOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(o *StreamOptions)
		bad  string
	}{
		{"default", func(o *StreamOptions) {}, ""},
		{"zero means default", func(o *StreamOptions) { o.MaxMessage, o.ReadBuffer = 0, 0 }, ""},
		{"negative max", func(o *StreamOptions) { o.MaxMessage = -1 }, "MaxMessage"},
		{"huge max", func(o *StreamOptions) { o.MaxMessage = 1 << 33 }, "MaxMessage"},
		{"tiny buffer", func(o *StreamOptions) { o.ReadBuffer = 1 }, "ReadBuffer"},
		{"socket buffer", func(o *StreamOptions) { o.SocketBuffer = -1 }, "SocketBuffer"},
		{"socket buffer set", func(o *StreamOptions) { o.SocketBuffer = 4 << 20 }, ""},
	}
	for _, tc := range cases {
		o := DefaultStreamOptions()
		tc.mod(&o)
		err := o.Validate()
		if (tc.bad == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("%s: got %v, want error about %q", tc.name, err, tc.bad)
		}
	}
}

func TestNewStreamEndpointArgs(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cases := []struct {
		name       string
		rank, size int
		conns      []io.ReadWriteCloser
		want       string
	}{
		{"size", 0, 0, nil, "job size"},
		{"rank", 2, 2, []io.ReadWriteCloser{a, nil}, "rank 2 out of range"},
		{"count", 0, 2, []io.ReadWriteCloser{nil}, "1 connections"},
		{"self", 0, 2, []io.ReadWriteCloser{a, b}, "conns[0] must be nil"},
		{"missing", 0, 2, []io.ReadWriteCloser{nil, nil}, "no connection to rank 1"},
	}
	for _, tc := range cases {
		_, err := NewStreamEndpoint(tc.rank, tc.size, tc.conns, DefaultStreamOptions())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestStreamOrderingAndChannels sends interleaved messages on several channels, of sizes on
// both sides of the read buffer, and receives the channels in another order than they were
// sent; each (peer, channel) must come out in its own order.
func TestStreamOrderingAndChannels(t *testing.T) {
	sizes := []int{0, 1, 7, 4096, 70000, 300000}
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, 3, DefaultStreamOptions(), nil)
			ctx := context.Background()
			chans := []Channel{chanFirst, chanSecond, chanUser + 5}
			const perChan = 12
			var wg sync.WaitGroup
			errc := make(chan error, 16)
			for _, from := range []int{0, 2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perChan; i++ {
						for ci, ch := range chans {
							n := sizes[(i+ci)%len(sizes)]
							h := Header{Channel: ch, Seq: uint64(i), Op: uint32(from), Segment: uint32(ci)}
							if err := eps[from].Send(ctx, 1, h, payloadOf(n, uint64(i*10+ci+from*1000))); err != nil {
								errc <- err
								return
							}
						}
					}
				}()
			}
			buf := make([]byte, 1<<20)
			// Receive channel by channel, last channel first, alternating the senders.
			for ci := len(chans) - 1; ci >= 0; ci-- {
				for i := 0; i < perChan; i++ {
					for _, from := range []int{2, 0} {
						h := Header{Channel: chans[ci], Seq: uint64(i), Op: uint32(from), Segment: uint32(ci)}
						n, err := eps[1].Recv(ctx, from, h, buf)
						if err != nil {
							t.Fatal(err)
						}
						want := payloadOf(sizes[(i+ci)%len(sizes)], uint64(i*10+ci+from*1000))
						if !bytes.Equal(buf[:n], want) {
							t.Fatalf("chan %d msg %d from %d: payload differs (%d bytes, want %d)", chans[ci], i, from, n, len(want))
						}
					}
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
		})
	}
}

func TestStreamSelfSend(t *testing.T) {
	eps := streamJob(t, "pipe", 2, DefaultStreamOptions(), nil)
	ctx := context.Background()
	for _, codec := range []Codec{CodecNone, CodecFP16} {
		src := f32Bytes(1, 2, 0.1)
		h := Header{Channel: chanUser, Codec: codec, Seq: 5}
		if err := eps[1].Send(ctx, 1, h, src); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := eps[1].Recv(ctx, 1, h, buf)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := memRoundTrip(codec, src)
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("%v: self-send delivered %v, want %v", codec, bytesF32(buf[:n]), bytesF32(want))
		}
	}
}

func TestStreamCodecs(t *testing.T) {
	src := gradient(50000, 11)
	text := []byte(strings.Repeat("compressible ", 20000))
	for _, kind := range streamKinds {
		for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd, CodecFP16, CodecBF16} {
			t.Run(kind+"/"+codec.String(), func(t *testing.T) {
				eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
				ctx := context.Background()
				payloads := [][]byte{src, {}, f32Bytes(1)}
				if !codec.Lossy() {
					payloads = append(payloads, text, []byte{9, 8, 7})
				}
				sent := make(chan struct{})
				go func() {
					defer close(sent)
					for i, p := range payloads {
						if err := eps[0].Send(ctx, 1, Header{Codec: codec, Seq: uint64(i)}, p); err != nil {
							t.Error(err)
							return
						}
					}
				}()
				buf := make([]byte, 1<<20)
				for i, p := range payloads {
					n, err := eps[1].Recv(ctx, 0, Header{Seq: uint64(i)}, buf)
					if err != nil {
						t.Fatal(err)
					}
					want := p
					if codec.Lossy() {
						want, _ = memRoundTrip(codec, p)
					}
					if !bytes.Equal(buf[:n], want) {
						t.Fatalf("message %d: payload differs", i)
					}
				}
				<-sent
				st0, st1 := eps[0].Stats(), eps[1].Stats()
				if st0.MsgsSent != uint64(len(payloads)) || st1.MsgsRecv != st0.MsgsSent ||
					st1.BytesRecv != st0.BytesSent || st1.WireBytesRecv != st0.WireBytesSent {
					t.Fatalf("stats disagree: sender %+v receiver %+v", st0, st1)
				}
				if codec != CodecNone && codec != CodecS2 && st0.WireBytesSent >= st0.BytesSent {
					t.Fatalf("%v did not shrink the payload: %+v", codec, st0)
				}
			})
		}
	}
}

func TestStreamHeaderMismatch(t *testing.T) {
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
			ctx := context.Background()
			if err := eps[0].Send(ctx, 1, Header{Seq: 4, Op: 0xaa, Segment: 1}, []byte("x")); err != nil {
				t.Fatal(err)
			}
			_, err := eps[1].Recv(ctx, 0, Header{Seq: 4, Op: 0xbb, Segment: 1}, make([]byte, 8))
			var me *MismatchError
			if !errors.As(err, &me) || me.Rank != 1 || me.Peer != 0 || me.Got.Op != 0xaa {
				t.Fatalf("got %v, want a *MismatchError from rank 0 at rank 1", err)
			}
			// The link stays usable.
			if err := eps[0].Send(ctx, 1, Header{Seq: 5}, []byte("y")); err != nil {
				t.Fatal(err)
			}
			if _, err := eps[1].Recv(ctx, 0, Header{Seq: 5}, make([]byte, 8)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// flipConn flips one bit of the byte at stream offset `at` on the way out.
type flipConn struct {
	net.Conn
	at, off int64
}

func (c *flipConn) Write(p []byte) (int, error) {
	if c.at >= c.off && c.at < c.off+int64(len(p)) {
		q := append([]byte(nil), p...)
		q[c.at-c.off] ^= 0x20
		p = q
	}
	n, err := c.Conn.Write(p)
	c.off += int64(n)
	return n, err
}

func TestStreamCorruptionIsFrameError(t *testing.T) {
	const size = 1000
	cases := []struct {
		name   string
		at     int64 // offset in the second frame
		reason string
	}{
		{"magic", 1, "bad magic"},
		{"header field", 20, "header checksum"},
		{"payload", FrameHeaderSize + 500, "payload checksum"},
	}
	for _, kind := range streamKinds {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				at := int64(FrameHeaderSize+size) + tc.at
				eps := streamJob(t, kind, 2, DefaultStreamOptions(), func(from, to int, c net.Conn) io.ReadWriteCloser {
					if from == 0 {
						return &flipConn{Conn: c, at: at}
					}
					return c
				})
				ctx := context.Background()
				go func() {
					for i := 0; i < 3; i++ {
						// The sender may see the link close under it; that is fine.
						eps[0].Send(ctx, 1, Header{Seq: uint64(i)}, payloadOf(size, 1))
					}
				}()
				buf := make([]byte, 2*size)
				if _, err := eps[1].Recv(ctx, 0, Header{Seq: 0}, buf); err != nil {
					t.Fatalf("first frame: %v", err)
				}
				for i := 1; i < 3; i++ {
					_, err := eps[1].Recv(ctx, 0, Header{Seq: uint64(i)}, buf)
					var fe *FrameError
					if !errors.As(err, &fe) || fe.Rank != 1 || fe.Peer != 0 || !strings.Contains(err.Error(), tc.reason) {
						t.Fatalf("recv %d: got %v, want a *FrameError about %q from rank 0 at rank 1", i, err, tc.reason)
					}
				}
				// The sender's side learns that the link is gone instead of hanging.
				_, err := eps[0].Recv(ctx, 1, Header{}, buf)
				var pe *PeerError
				if !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 {
					t.Fatalf("sender's recv: got %v, want a *PeerError", err)
				}
			})
		}
	}
}

// rawPeer returns rank 0's endpoint of a 2-rank job and the raw connection standing for rank 1.
func rawPeer(t *testing.T, kind string, opts StreamOptions) (Endpoint, net.Conn) {
	a, b := connPair(t, kind)
	ep, err := NewStreamEndpoint(0, 2, []io.ReadWriteCloser{nil, a}, kindOptions(kind, opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close(); b.Close() })
	return ep, b
}

func rawFrame(h Header, payload []byte) []byte {
	tab := crcTable()
	f := FrameHeader{Header: h, Flags: FlagChecksum, RawLen: uint32(len(payload)), WireLen: uint32(len(payload)),
		PayloadCRC: crc32.Checksum(payload, tab)}
	b := make([]byte, FrameHeaderSize, FrameHeaderSize+len(payload))
	MarshalFrameHeader(b, &f, tab)
	return append(b, payload...)
}

func TestStreamTruncatedAndClosed(t *testing.T) {
	frame := rawFrame(Header{Seq: 1}, payloadOf(100, 3))
	cases := []struct {
		name      string
		write     []byte
		unexpEOF  bool
		substring string
	}{
		{"eof between frames", nil, false, "closed by the peer"},
		{"truncated header", frame[:20], true, "truncated"},
		{"truncated payload", frame[:FrameHeaderSize+50], true, "truncated"},
	}
	for _, kind := range streamKinds {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				ep, raw := rawPeer(t, kind, DefaultStreamOptions())
				ctx := context.Background()
				go func() {
					raw.Write(tc.write)
					raw.Close()
				}()
				for i := 0; i < 2; i++ {
					_, err := ep.Recv(ctx, 1, Header{Seq: 1}, make([]byte, 200))
					var pe *PeerError
					if !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 || !strings.Contains(err.Error(), tc.substring) ||
						errors.Is(err, io.ErrUnexpectedEOF) != tc.unexpEOF {
						t.Fatalf("recv %d: got %v, want a *PeerError saying %q", i, err, tc.substring)
					}
				}
			})
		}
	}
}

func TestStreamQueuedBeforeFailureStillDelivered(t *testing.T) {
	ep, raw := rawPeer(t, "tcp", DefaultStreamOptions())
	ctx := context.Background()
	msg := payloadOf(300, 4)
	raw.Write(append(rawFrame(Header{Seq: 7}, msg), "garbage that is not a frame header......................"...))
	buf := make([]byte, 512)
	n, err := ep.Recv(ctx, 1, Header{Seq: 7}, buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("good frame before the bad one: n=%d err=%v", n, err)
	}
	var fe *FrameError
	if _, err := ep.Recv(ctx, 1, Header{Seq: 8}, buf); !errors.As(err, &fe) {
		t.Fatalf("got %v, want *FrameError", err)
	}
}

func TestStreamRecvErrors(t *testing.T) {
	eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
	ctx := context.Background()
	if err := eps[0].Send(ctx, 1, Header{}, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := eps[1].Recv(ctx, 0, Header{}, make([]byte, 10)); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("small buffer: got %v", err)
	}
	if _, err := eps[1].Recv(ctx, 5, Header{}, nil); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("bad peer: got %v", err)
	}
	if err := eps[0].Send(ctx, 1, Header{Codec: 77}, nil); err == nil || !strings.Contains(err.Error(), "unknown codec") {
		t.Fatalf("bad codec: got %v", err)
	}
	if err := eps[0].Send(ctx, 1, Header{Codec: CodecBF16}, make([]byte, 3)); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
		t.Fatalf("bf16 of 3 bytes: got %v", err)
	}
	opts := DefaultStreamOptions()
	opts.MaxMessage = 1000
	small := streamJob(t, "pipe", 2, opts, nil)
	if err := small[0].Send(ctx, 1, Header{}, make([]byte, 1001)); err == nil || !strings.Contains(err.Error(), "message limit") {
		t.Fatalf("oversized send: got %v", err)
	}
}

func TestStreamOversizedIncomingFrame(t *testing.T) {
	opts := DefaultStreamOptions()
	opts.MaxMessage = 1000
	ep, raw := rawPeer(t, "pipe", opts)
	go raw.Write(rawFrame(Header{}, make([]byte, 2000)))
	_, err := ep.Recv(context.Background(), 1, Header{}, make([]byte, 4000))
	var fe *FrameError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "message limit") {
		t.Fatalf("got %v, want *FrameError about the limit", err)
	}
}

func TestStreamCancelUnblocksRecv(t *testing.T) {
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
			ctx, cancel := context.WithCancel(context.Background())
			go cancel()
			_, err := eps[1].Recv(ctx, 0, Header{}, make([]byte, 10))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			// Self-receive too.
			_, err = eps[1].Recv(ctx, 1, Header{}, make([]byte, 10))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("self: got %v, want context.Canceled", err)
			}
			// The endpoint still works afterwards.
			bg := context.Background()
			if err := eps[0].Send(bg, 1, Header{Seq: 1}, []byte("after")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			if n, err := eps[1].Recv(bg, 0, Header{Seq: 1}, buf); err != nil || string(buf[:n]) != "after" {
				t.Fatalf("after cancel: %q %v", buf[:n], err)
			}
		})
	}
}

func waitState(p *streamPeer, state int) {
	for {
		p.mu.Lock()
		ib := p.inboxes[0]
		ok := ib != nil && ib.w.state == state
		p.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// TestStreamCancelDuringZeroCopyFill cancels a Recv while the reader is writing a half-arrived
// payload into its buffer. The Recv must return, and the message must reach the next Recv
// whole.
func TestStreamCancelDuringZeroCopyFill(t *testing.T) {
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			ep, raw := rawPeer(t, kind, DefaultStreamOptions())
			msg := payloadOf(1<<20, 5)
			frame := rawFrame(Header{Seq: 3}, msg)
			half := FrameHeaderSize + len(msg)/2

			ctx, cancel := context.WithCancel(context.Background())
			sep := ep.(*streamEndpoint)
			p := sep.peers[1].Load()
			done := make(chan error, 1)
			buf := make([]byte, len(msg))
			go func() {
				_, err := ep.Recv(ctx, 1, Header{Seq: 3}, buf)
				done <- err
			}()
			// Wait (without a clock) until the Recv is posted, send half the frame, and wait
			// until the reader is filling buf.
			waitState(p, wPosted)
			go raw.Write(frame[:half])
			waitState(p, wFilling)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled recv: got %v", err)
			}
			go raw.Write(frame[half:])
			got := make([]byte, len(msg))
			n, err := ep.Recv(context.Background(), 1, Header{Seq: 3}, got)
			if err != nil || !bytes.Equal(got[:n], msg) {
				t.Fatalf("next recv: n=%d err=%v, payload intact=%v", n, err, bytes.Equal(got[:n], msg))
			}
		})
	}
}

func TestStreamSendDeadline(t *testing.T) {
	// Nobody reads rank 1's end, so a large Send blocks until its deadline.
	ep, _ := rawPeer(t, "pipe", DefaultStreamOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 50e6)
	defer cancel()
	err := ep.Send(ctx, 1, Header{}, make([]byte, 1<<20))
	var pe *PeerError
	if !errors.As(err, &pe) || !errors.Is(err, context.DeadlineExceeded) || pe.Peer != 1 {
		t.Fatalf("got %v, want a *PeerError with context.DeadlineExceeded", err)
	}
	// A cancellable context without deadline interrupts the write as well.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go cancel2()
	if err := ep.Send(ctx2, 1, Header{}, make([]byte, 1<<20)); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestStreamCloseUnblocks(t *testing.T) {
	eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
	done := make(chan error, 2)
	go func() {
		_, err := eps[1].Recv(context.Background(), 0, Header{}, make([]byte, 10))
		done <- err
	}()
	go func() {
		_, err := eps[1].Recv(context.Background(), 1, Header{}, make([]byte, 10))
		done <- err
	}()
	eps[1].Close()
	for i := 0; i < 2; i++ {
		if err := <-done; err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("got %v, want an error saying the endpoint is closed", err)
		}
	}
	if err := eps[1].Send(context.Background(), 0, Header{}, nil); err == nil {
		t.Fatal("send after close succeeded")
	}
}

// TestStreamConcurrent has every rank send to every rank (itself included) on several
// channels from several goroutines while it receives; run it with -race.
func TestStreamConcurrent(t *testing.T) {
	const size, msgs = 4, 20
	chans := []Channel{0, 1, 2}
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, size, DefaultStreamOptions(), nil)
			ctx := context.Background()
			var wg sync.WaitGroup
			errc := make(chan error, size*size*len(chans)*2)
			for r := 0; r < size; r++ {
				for peer := 0; peer < size; peer++ {
					for _, ch := range chans {
						wg.Add(2)
						go func() {
							defer wg.Done()
							for i := 0; i < msgs; i++ {
								n := (i * 7919 * (int(ch) + 1)) % 40000
								h := Header{Channel: ch, Seq: uint64(i), Op: uint32(r)}
								if err := eps[r].Send(ctx, peer, h, payloadOf(n, uint64(r*100+peer))); err != nil {
									errc <- err
									return
								}
							}
						}()
						go func() {
							defer wg.Done()
							buf := make([]byte, 40000)
							for i := 0; i < msgs; i++ {
								n, err := eps[r].Recv(ctx, peer, Header{Channel: ch, Seq: uint64(i), Op: uint32(peer)}, buf)
								if err != nil {
									errc <- err
									return
								}
								want := payloadOf((i*7919*(int(ch)+1))%40000, uint64(peer*100+r))
								if !bytes.Equal(buf[:n], want) {
									k := 0
									for k < min(n, len(want)) && buf[k] == want[k] {
										k++
									}
									errc <- fmt.Errorf("rank %d from %d chan %d msg %d: payload differs: %d bytes, want %d, first difference at %d", r, peer, ch, i, n, len(want), k)
									return
								}
							}
						}()
					}
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
		})
	}
}

func TestStreamSteadyStateAllocs(t *testing.T) {
	for _, kind := range []string{"tcp", "unix", "tcp+poll"} {
		for _, codec := range []Codec{CodecNone, CodecFP16, CodecS2} {
			t.Run(kind+"/"+codec.String(), func(t *testing.T) {
				eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
				ctx := context.Background()
				msg := gradient(16<<10, 1) // 64 KiB
				buf := make([]byte, len(msg))
				h := Header{Codec: codec}
				round := func() {
					if err := eps[0].Send(ctx, 1, h, msg); err != nil {
						t.Fatal(err)
					}
					if _, err := eps[1].Recv(ctx, 0, h, buf); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < 20; i++ {
					round()
				}
				if a := testing.AllocsPerRun(200, round); a != 0 && !raceEnabled {
					t.Fatalf("%v allocations per message", a)
				}
			})
		}
	}
}

// TestStreamUndecodablePayload sends frames whose headers and checksums are right but whose
// compressed payloads are garbage: the receiver must report a *FrameError, not panic.
func TestStreamUndecodablePayload(t *testing.T) {
	tab := crcTable()
	cases := []struct {
		codec   Codec
		raw     uint32
		payload []byte
	}{
		{CodecS2, 100, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3}},
		{CodecS2, 5000, []byte{100, 0, 1, 2, 3}}, // announces 100 bytes, frame says 5000
		{CodecZstd, 100, []byte("definitely not a zstd frame")},
	}
	for _, tc := range cases {
		t.Run(tc.codec.String(), func(t *testing.T) {
			ep, raw := rawPeer(t, "pipe", DefaultStreamOptions())
			f := FrameHeader{Header: Header{Codec: tc.codec}, Flags: FlagChecksum, RawLen: tc.raw,
				WireLen: uint32(len(tc.payload)), PayloadCRC: crc32.Checksum(tc.payload, tab)}
			b := make([]byte, FrameHeaderSize)
			MarshalFrameHeader(b, &f, tab)
			go raw.Write(append(b, tc.payload...))
			_, err := ep.Recv(context.Background(), 1, Header{}, make([]byte, 8192))
			var fe *FrameError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "does not decode") {
				t.Fatalf("got %v, want a *FrameError saying the payload does not decode", err)
			}
		})
	}
}

// plainConn hides everything but Read, Write and Close, like a stream type without deadlines.
type plainConn struct{ io.ReadWriteCloser }

// TestStreamCancelDuringFillWithoutDeadlines: on a connection without read deadlines the only
// way to stop a read into the caller's buffer is to close the connection. The Recv returns,
// and later Recvs from that peer fail instead of hanging.
func TestStreamCancelDuringFillWithoutDeadlines(t *testing.T) {
	a, raw := connPair(t, "tcp")
	t.Cleanup(func() { raw.Close() })
	ep, err := NewStreamEndpoint(0, 2, []io.ReadWriteCloser{nil, plainConn{a}}, DefaultStreamOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	msg := payloadOf(1<<20, 6)
	frame := rawFrame(Header{Seq: 1}, msg)
	p := ep.(*streamEndpoint).peers[1].Load()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ep.Recv(ctx, 1, Header{Seq: 1}, make([]byte, len(msg)))
		done <- err
	}()
	waitState(p, wPosted)
	if _, err := raw.Write(frame[:len(frame)/2]); err != nil {
		t.Fatal(err)
	}
	waitState(p, wFilling)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled recv: got %v", err)
	}
	_, err = ep.Recv(context.Background(), 1, Header{Seq: 1}, make([]byte, len(msg)))
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "cancelled in the middle") {
		t.Fatalf("next recv: got %v, want a *PeerError saying why the link closed", err)
	}
}

// TestStreamDirectPaths posts the Recv before the frame arrives, so that the payload goes
// straight into the caller's buffer (read for none, decoded for the other codecs).
func TestStreamDirectPaths(t *testing.T) {
	src := gradient(30000, 8)
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd, CodecFP16, CodecBF16} {
		t.Run(codec.String(), func(t *testing.T) {
			eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
			p := eps[1].(*streamEndpoint).peers[0].Load()
			buf := make([]byte, len(src))
			done := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = eps[1].Recv(context.Background(), 0, Header{Seq: 2}, buf)
				done <- err
			}()
			waitState(p, wPosted)
			if err := eps[0].Send(context.Background(), 1, Header{Codec: codec, Seq: 2}, src); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			want, _ := memRoundTrip(codec, src)
			if !bytes.Equal(buf[:n], want) {
				t.Fatal("payload differs")
			}
			p.mu.Lock()
			queued := !p.inboxes[0].empty()
			p.mu.Unlock()
			if queued {
				t.Fatal("message was queued instead of delivered to the waiting Recv")
			}
		})
	}
}

// TestStreamSteadyStateAllocsWaitingReceiver is the allocation check with the receiver already
// waiting, which takes the direct (zero-copy or decode-into-buffer) paths.
func TestStreamSteadyStateAllocsWaitingReceiver(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecBF16} {
		t.Run(codec.String(), func(t *testing.T) {
			eps := streamJob(t, "tcp", 2, DefaultStreamOptions(), nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			msg := gradient(16<<10, 2)
			h := Header{Codec: codec}
			got := make(chan error)
			go func() {
				buf := make([]byte, len(msg))
				for {
					_, err := eps[1].Recv(ctx, 0, h, buf)
					select {
					case got <- err:
					case <-ctx.Done():
						return
					}
				}
			}()
			round := func() {
				if err := eps[0].Send(context.Background(), 1, h, msg); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 20; i++ {
				round()
			}
			if a := testing.AllocsPerRun(200, round); a != 0 && !raceEnabled {
				t.Fatalf("%v allocations per message", a)
			}
		})
	}
}

// TestStreamPollingReceiverReadsItself checks that with Poll a waiting receiver reads frames
// from the socket itself (the point of polling), and that ping-pong over such links delivers
// every message intact and in order.
func TestStreamPollingReceiverReadsItself(t *testing.T) {
	for _, kind := range []string{"tcp+poll", "unix+poll"} {
		t.Run(kind, func(t *testing.T) {
			eps := streamJob(t, kind, 2, DefaultStreamOptions(), nil)
			ctx := context.Background()
			const rounds = 500
			errc := make(chan error, 1)
			go func() {
				buf := make([]byte, 8192)
				for i := 0; i < rounds; i++ {
					h := Header{Seq: uint64(i)}
					n, err := eps[1].Recv(ctx, 0, h, buf)
					if err == nil {
						err = eps[1].Send(ctx, 0, h, buf[:n])
					}
					if err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			buf := make([]byte, 8192)
			for i := 0; i < rounds; i++ {
				h := Header{Seq: uint64(i)}
				msg := payloadOf(1+i*13%8000, uint64(i))
				if err := eps[0].Send(ctx, 1, h, msg); err != nil {
					t.Fatal(err)
				}
				n, err := eps[0].Recv(ctx, 1, h, buf)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf[:n], msg) {
					t.Fatalf("round %d: echo differs", i)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			polled := eps[0].(*streamEndpoint).polled.Load() + eps[1].(*streamEndpoint).polled.Load()
			if polled == 0 {
				t.Fatalf("no frame of %d was read by a polling receiver", 2*rounds)
			}
			t.Logf("%d of %d frames read by polling receivers", polled, 2*rounds)
		})
	}
}

// A send to a peer that was failed from outside the data path (its heartbeats stopped)
// reports why the peer was failed, not the closed connection the failure left behind.
func TestStreamSendToFailedPeerSaysWhy(t *testing.T) {
	for _, kind := range streamKinds {
		t.Run(kind, func(t *testing.T) {
			ep, _ := rawPeer(t, kind, DefaultStreamOptions())
			why := &UnresponsiveError{Rank: 0, Peer: 1, Silent: 9 * time.Second, Limit: 8 * time.Second}
			ep.(PeerFailer).FailPeer(1, why)
			err := ep.Send(context.Background(), 1, Header{Seq: 1}, payloadOf(64, 1))
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, why) {
				t.Fatalf("send to the failed peer: got %v, want a *PeerError wrapping %v", err, why)
			}
			if strings.Contains(err.Error(), "closed network connection") {
				t.Fatalf("send to the failed peer: %v names the closed connection, not why", err)
			}
		})
	}
}

// TestStreamCancelAtEndOfWrite: a Send whose context (with no deadline) is cancelled right at
// the end of its write leaves the connection usable for the next Send, however late the
// context's handler moves the write deadline. Send used to reset the deadline without
// waiting for the handler, whose past deadline then landed after the reset and failed the
// next write on the connection.
func TestStreamCancelAtEndOfWrite(t *testing.T) {
	for _, kind := range []string{"pipe", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			var lc *lateconn.Conn
			eps := streamJob(t, kind, 2, DefaultStreamOptions(), func(from, to int, c net.Conn) io.ReadWriteCloser {
				if from != 0 {
					return c
				}
				lc = lateconn.New(c, 300*time.Millisecond)
				return lc
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make([]byte, 8)
			recvd := make(chan error, 2)
			go func() {
				for seq := range 2 {
					_, err := eps[1].Recv(ctx, 0, Header{Seq: uint64(seq)}, got)
					recvd <- err
				}
			}()
			sctx, scancel := context.WithCancel(context.Background())
			lc.AfterWrite = scancel
			// The write went out whole, so whether this Send reports the cancellation or not,
			// the message was sent.
			_ = eps[0].Send(sctx, 1, Header{Seq: 0}, []byte("first"))
			lc.AfterWrite = nil
			select {
			case <-lc.PastSet():
			case <-ctx.Done():
				t.Fatal("the cancelled Send's handler never set the write deadline")
			}
			// A context with no deadline sets none: the connection's own must be clear.
			if err := eps[0].Send(context.Background(), 1, Header{Seq: 1}, []byte("second")); err != nil {
				t.Fatalf("the Send after a cancelled one: %v", err)
			}
			for range 2 {
				if err := <-recvd; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
