package p2p

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
)

// wireConn is a net.Conn whose writes collect in w and whose reads come from r, so a test can
// look at, and tamper with, the bytes between two data channels.
type wireConn struct {
	net.Conn // nil: only Read, Write and CloseWrite are used
	w        *bytes.Buffer
	r        io.Reader
}

func (c *wireConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *wireConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *wireConn) CloseWrite() error           { return nil }

// testKeys is a fixed key material for channel tests.
func testKeys() []byte {
	km := make([]byte, dataKeyMaterial)
	for i := range km {
		km[i] = byte(i*7 + 1)
	}
	return km
}

// sealWrites runs writes (their sizes) through a dialer-side channel and returns the bytes it
// put on the wire and what was written.
func sealWrites(t *testing.T, chacha bool, sizes []int) (wire, sent []byte) {
	t.Helper()
	out := &bytes.Buffer{}
	w, err := newDataChannelKeys(&wireConn{w: out}, testKeys(), true, chacha)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range sizes {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*31 + k*17 + i>>9)
		}
		if m, err := w.Write(p); m != n || err != nil {
			t.Fatalf("write of %d bytes: %d, %v", n, m, err)
		}
		sent = append(sent, p...)
	}
	return out.Bytes(), sent
}

// openAll reads wire through a listener-side channel with reads of at most chunk bytes.
func openAll(t *testing.T, chacha bool, wire []byte, chunk int) ([]byte, error) {
	t.Helper()
	r, err := newDataChannelKeys(&wireConn{r: bytes.NewReader(wire)}, testKeys(), false, chacha)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, chunk)
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
	}
}

// dataCiphers are the channel's two AEADs, by name.
var dataCiphers = []struct {
	name   string
	chacha bool
}{{"aes-128-gcm", false}, {"chacha20-poly1305", true}}

// TestDataChannelRoundTrip: writes of odd sizes around the record size come back intact
// whatever the reader's buffer, read straight into it or through the channel's own.
func TestDataChannelRoundTrip(t *testing.T) {
	sizes := []int{1, 47, 0, 48, 4095, dataRecordMax - 1, dataRecordMax, dataRecordMax + 1, 3*dataRecordMax + 7, 9}
	for _, c := range dataCiphers {
		wire, sent := sealWrites(t, c.chacha, sizes)
		for _, chunk := range []int{1, 7, 1000, dataRecordMax - 3, dataRecordMax, dataRecordMax + dataRecordTag, 5 * dataRecordMax} {
			t.Run(fmt.Sprintf("%s/%d", c.name, chunk), func(t *testing.T) {
				got, err := openAll(t, c.chacha, wire, chunk)
				if !bytes.Equal(got, sent) {
					t.Fatalf("got %d bytes back, sent %d (equal prefix: %v)", len(got), len(sent), bytes.HasPrefix(sent, got))
				}
				if err == nil || !strings.Contains(err.Error(), "without a close record") {
					t.Fatalf("end of the wire: %v, want the missing close record", err)
				}
			})
		}
	}
}

// TestDataChannelRefusesTampering: any changed, dropped, repeated or cut record is an error,
// never different bytes; only the close record ends the stream cleanly.
func TestDataChannelRefusesTampering(t *testing.T) {
	for _, c := range dataCiphers {
		t.Run(c.name, func(t *testing.T) { checkTampering(t, c.chacha) })
	}
}

func checkTampering(t *testing.T, chacha bool) {
	sizes := []int{100, 5000, 100}
	wire, sent := sealWrites(t, chacha, sizes)
	rec := func(i int) (start, end int) { // the i-th record's span on the wire
		for k := 0; k <= i; k++ {
			start, end = end, end+dataRecordHdr+sizes[k]+dataRecordTag
		}
		return start, end
	}
	s1, e1 := rec(1)
	s2, e2 := rec(2)
	edit := func(f func(w []byte) []byte) []byte { return f(bytes.Clone(wire)) }
	closed := func() []byte {
		out := &bytes.Buffer{}
		w, err := newDataChannelKeys(&wireConn{w: out}, testKeys(), true, chacha)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(sent[:100])
		if err := w.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte{1}); err == nil {
			t.Error("a write after CloseWrite succeeded")
		}
		return out.Bytes()
	}
	cases := []struct {
		name string
		wire []byte
		want string // in the error; "EOF" is a clean io.EOF
		good int    // bytes that must have come back before it
	}{
		{"payload bit", edit(func(w []byte) []byte { w[s1+dataRecordHdr+77] ^= 4; return w }), "failed authentication", 100},
		{"tag bit", edit(func(w []byte) []byte { w[e1-1] ^= 1; return w }), "failed authentication", 100},
		{"length", edit(func(w []byte) []byte { w[s1+3]--; return w }), "failed authentication", 100},
		{"huge length", edit(func(w []byte) []byte { w[s1+1] = 0x7f; return w }), "announces", 100},
		{"close flag set", edit(func(w []byte) []byte { w[s1] |= 0x80; return w }), "failed authentication", 100},
		{"record dropped", edit(func(w []byte) []byte { return append(w[:s1], w[e1:]...) }), "failed authentication", 100},
		{"record repeated", edit(func(w []byte) []byte { return append(w[:e1], w[s1:]...) }), "failed authentication", 5100},
		{"records swapped", edit(func(w []byte) []byte {
			return append(append(append([]byte{}, w[:s1]...), w[s2:e2]...), w[s1:e1]...)
		}), "failed authentication", 100},
		{"other direction", func() []byte {
			out := &bytes.Buffer{}
			w, _ := newDataChannelKeys(&wireConn{w: out}, testKeys(), false, chacha)
			w.Write(sent[:100])
			return out.Bytes()
		}(), "failed authentication", 0},
		{"cut inside a record", wire[:e1-5], "ended inside a record", 100},
		{"cut between records", wire[:e1], "without a close record", 5100},
		{"close record", closed(), "EOF", 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := openAll(t, chacha, tc.wire, 1<<20)
			if !bytes.Equal(got, sent[:tc.good]) {
				t.Errorf("got %d bytes (a prefix of what was sent: %v), want the first %d", len(got), bytes.HasPrefix(sent, got), tc.good)
			}
			switch {
			case tc.want == "EOF":
				if err != io.EOF {
					t.Errorf("error %v, want io.EOF", err)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			case errors.Is(err, io.EOF):
				t.Errorf("error %v passes for a clean end of stream", err)
			}
		})
	}
}

// BenchmarkDataChannelCost measures, per byte of one 256 KiB record, what the data channel
// adds to a plain socket: sealing (from the caller's buffer into the send buffer) and opening
// (from the receive buffer into the caller's), with each AEAD, and for scale the plain copy.
func BenchmarkDataChannelCost(b *testing.B) {
	src := make([]byte, dataRecordMax)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, dataRecordMax+dataRecordTag)
	hdr := []byte{0, 4, 0, 16}
	for _, c := range dataCiphers {
		ch, err := newDataChannelKeys(nil, testKeys(), true, c.chacha)
		if err != nil {
			b.Fatal(err)
		}
		n := nonce(&ch.wiv, 0)
		rec := ch.seal.Seal(nil, n[:], src, hdr)
		b.Run(c.name+"/seal", func(b *testing.B) {
			b.SetBytes(dataRecordMax)
			for b.Loop() {
				ch.seal.Seal(dst[:0], n[:], src, hdr)
			}
		})
		b.Run(c.name+"/open", func(b *testing.B) {
			b.SetBytes(dataRecordMax)
			for b.Loop() {
				if _, err := ch.seal.Open(dst[:0], n[:], rec, hdr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(dataRecordMax)
		for b.Loop() {
			copy(dst, src)
		}
	})
}
