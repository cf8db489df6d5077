package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// frameHeader is the size of transport's frame header, which the tests write before each
// payload as the stream endpoint does.
const frameHeader = 48

// tcpConns returns both ends of a loopback TCP connection.
func tcpConns(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	a, b := connPair(t, "tcp", "127.0.0.1:0")
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// connPair returns both ends of a connection to a listener on network and addr, closed when
// the test ends.
func connPair(t *testing.T, network, addr string) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Frames written with raw writevs arrive whole and in order, also when the socket takes part
// of a frame at a time (small buffers and a slow reader) and the writer parks until it is
// writable, and when a frame is larger than rawSlice (written a slice at a time); reads
// smaller than a frame and larger than rawSlice return every byte, then io.EOF.
func TestRawSockFrames(t *testing.T) {
	for _, n := range []int{0, 1, 7, 4093, 65521, 64 << 10, 3*rawSlice + 5} {
		for _, bufSize := range []int{0, 16 << 10} {
			a, b := tcpConns(t)
			if bufSize > 0 {
				a.SetWriteBuffer(bufSize)
				b.SetReadBuffer(bufSize)
			}
			w, r := New(a), New(b)
			if w == nil || r == nil {
				t.Fatal("a TCP connection has no raw socket")
			}
			const frames = 5
			var want bytes.Buffer
			done := make(chan error, 1)
			go func() {
				hdr := make([]byte, frameHeader)
				payload := make([]byte, n)
				for i := range frames {
					for j := range hdr {
						hdr[j] = byte(i + j)
					}
					for j := range payload {
						payload[j] = byte(i*31 + j*7)
					}
					k, err := w.WriteFrame(hdr, payload)
					if err == nil && k != int64(len(hdr)+n) {
						err = errors.New("short write")
					}
					if err != nil {
						done <- err
						return
					}
				}
				done <- a.CloseWrite()
			}()
			for i := range frames {
				for j := range frameHeader {
					want.WriteByte(byte(i + j))
				}
				for j := range n {
					want.WriteByte(byte(i*31 + j*7))
				}
			}
			var got bytes.Buffer
			buf := make([]byte, 3000) // reads smaller than a frame
			if n > 4096 {
				buf = make([]byte, 2*rawSlice+1) // and one larger than rawSlice
			}
			for reads := 0; ; reads++ {
				if bufSize > 0 && reads%8 == 0 {
					time.Sleep(100 * time.Microsecond) // a slow reader: the writer's socket fills
				}
				k, err := r.Read(buf)
				got.Write(buf[:k])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("payload %d, buffers %d: read: %v", n, bufSize, err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("payload %d, buffers %d: write: %v", n, bufSize, err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("payload %d, buffers %d: %d bytes arrived, want %d, or they differ", n, bufSize, got.Len(), want.Len())
			}
		}
	}
}

// A raw write that cannot finish ends at the connection's write deadline, reporting the bytes
// that went out, and a raw read at its read deadline: raw calls park as net.Conn's do.
func TestRawSockDeadlines(t *testing.T) {
	a, b := tcpConns(t)
	a.SetWriteBuffer(4 << 10)
	b.SetReadBuffer(4 << 10)
	w := New(a)
	a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	hdr, payload := make([]byte, frameHeader), make([]byte, rawSlice+rawSlice/2)
	var total int64
	var err error
	for err == nil && total < 16<<20 {
		var k int64
		k, err = w.WriteFrame(hdr, payload)
		total += k
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("writing to a peer that never reads: %v after %d bytes, want the deadline", err, total)
	}
	r := New(a)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reading a silent peer: %v, want the deadline", err)
	}
}
