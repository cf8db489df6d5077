package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func f32Bytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// gradient returns n float32 values like a dense gradient.
func gradient(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * 1e-3)
	}
	return f32Bytes(v...)
}

func TestCodecLosslessRoundTrip(t *testing.T) {
	payloads := map[string][]byte{
		"empty":        {},
		"one byte":     {42},
		"text":         []byte(strings.Repeat("hetsync moves bytes. ", 500)),
		"gradient":     gradient(10000, 1),
		"zeros":        make([]byte, 1<<16),
		"odd length":   gradient(333, 2)[:1331],
		"large random": gradient(1<<18, 3),
	}
	c := NewPayloadCodec(0)
	defer c.Close()
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd} {
		for name, p := range payloads {
			t.Run(codec.String()+"/"+name, func(t *testing.T) {
				wire, err := c.Encode(codec, nil, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(wire) > MaxEncodedLen(codec, len(p)) {
					t.Fatalf("wire %d bytes > MaxEncodedLen %d", len(wire), MaxEncodedLen(codec, len(p)))
				}
				out := make([]byte, len(p))
				if err := c.Decode(codec, out, wire); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, p) {
					t.Fatal("round trip changed the payload")
				}
				if len(p) > 0 {
					if err := c.Decode(codec, make([]byte, len(p)+1), wire); err == nil {
						t.Fatal("decoding into the wrong length succeeded")
					}
				}
			})
		}
	}
}

func TestCodecCorruptInput(t *testing.T) {
	c := NewPayloadCodec(1 << 20)
	defer c.Close()
	p := []byte(strings.Repeat("abcdefgh", 1000))
	for _, codec := range []Codec{CodecS2, CodecZstd} {
		wire, err := c.Encode(codec, nil, p)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(7, 7))
		for i := 0; i < 200; i++ {
			bad := append([]byte(nil), wire...)
			switch i % 3 {
			case 0:
				bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
			case 1:
				bad = bad[:r.IntN(len(bad))]
			case 2:
				for j := range bad {
					bad[j] = byte(r.Uint32())
				}
			}
			// Neither format checksums its content (the frame does), so a flipped literal may
			// decode; what must hold is no panic, and an error for a truncated payload.
			out := make([]byte, len(p))
			if err := c.Decode(codec, out, bad); err == nil && i%3 == 1 {
				t.Fatalf("%v: truncated input (%d of %d bytes) decoded without error", codec, len(bad), len(wire))
			}
		}
	}
}

func TestFloatCodecsRejectNonFloatPayload(t *testing.T) {
	c := NewPayloadCodec(0)
	for _, codec := range []Codec{CodecFP16, CodecBF16} {
		if _, err := c.Encode(codec, nil, make([]byte, 6)); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
			t.Fatalf("%v: 6-byte payload: got %v", codec, err)
		}
	}
}

func TestFloatCodecTolerance(t *testing.T) {
	src := gradient(4096, 5)
	src = append(src, f32Bytes(1, -1, 3.14159, 1e-5, 60000, -12345.678)...)
	cases := []struct {
		codec Codec
		rel   float64
	}{
		{CodecFP16, 1.0 / (1 << 11)},
		{CodecBF16, 1.0 / (1 << 8)},
	}
	for _, tc := range cases {
		t.Run(tc.codec.String(), func(t *testing.T) {
			wire, err := EncodePayload(tc.codec, src)
			if err != nil {
				t.Fatal(err)
			}
			if len(wire) != len(src)/2 {
				t.Fatalf("wire %d bytes, want %d", len(wire), len(src)/2)
			}
			out, err := DecodePayload(tc.codec, wire, len(src))
			if err != nil {
				t.Fatal(err)
			}
			in, got := bytesF32(src), bytesF32(out)
			for i := range in {
				x := float64(in[i])
				// fp16 subnormals (below 2^-14) have an absolute, not relative, error bound.
				tol := math.Max(tc.rel*math.Abs(x), 1.0/(1<<25))
				if tc.codec == CodecBF16 {
					tol = tc.rel * math.Abs(x)
				}
				if d := math.Abs(float64(got[i]) - x); d > tol {
					t.Fatalf("value %d: %g became %g (error %g > %g)", i, x, got[i], d, tol)
				}
			}
		})
	}
}

func TestMemJobAppliesLossyCodecs(t *testing.T) {
	eps := NewMemJob(2)
	ctx := context.Background()
	src := f32Bytes(0.1, 1, 3.14159)
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd, CodecFP16, CodecBF16} {
		h := Header{Codec: codec, Seq: 1}
		if err := eps[0].Send(ctx, 1, h, src); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(src))
		n, err := eps[1].Recv(ctx, 0, h, buf)
		if err != nil {
			t.Fatal(err)
		}
		want, err := EncodePayload(codec, src)
		if err != nil {
			t.Fatal(err)
		}
		want, err = DecodePayload(codec, want, len(src))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("%v: mem delivered %v, the wire would deliver %v", codec, bytesF32(buf[:n]), bytesF32(want))
		}
		if codec.Lossy() && bytes.Equal(buf[:n], src) {
			t.Fatalf("%v: mem did not round 0.1", codec)
		}
	}
	if err := eps[0].Send(ctx, 1, Header{Codec: CodecFP16}, make([]byte, 5)); err == nil {
		t.Fatal("mem sent a 5-byte payload as fp16")
	}
}

func TestPayloadCodecSteadyStateAllocs(t *testing.T) {
	src := gradient(1<<14, 9)
	for _, codec := range []Codec{CodecS2, CodecZstd, CodecFP16, CodecBF16} {
		c := NewPayloadCodec(0)
		var wire []byte
		out := make([]byte, len(src))
		round := func() {
			var err error
			if wire, err = c.Encode(codec, wire, src); err != nil {
				t.Fatal(err)
			}
			if err = c.Decode(codec, out, wire); err != nil {
				t.Fatal(err)
			}
		}
		round()
		if a := testing.AllocsPerRun(50, round); a != 0 {
			t.Errorf("%v: %v allocations per encode+decode", codec, a)
		}
		c.Close()
	}
}

func BenchmarkCodec(b *testing.B) {
	src := gradient(1<<18, 4) // 1 MiB of float32
	for _, codec := range []Codec{CodecS2, CodecZstd, CodecFP16, CodecBF16} {
		c := NewPayloadCodec(0)
		wire, err := c.Encode(codec, nil, src)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(codec.String()+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				wire, _ = c.Encode(codec, wire, src)
			}
		})
		out := make([]byte, len(src))
		b.Run(codec.String()+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := c.Decode(codec, out, wire); err != nil {
					b.Fatal(err)
				}
			}
		})
		c.Close()
	}
}
