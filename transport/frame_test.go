package transport

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

func TestFrameHeaderRoundTrip(t *testing.T) {
	tab := crcTable()
	cases := []FrameHeader{
		{},
		{Header: Header{Channel: chanFirst, Seq: 1, Op: 0xdeadbeef, Segment: 7}, RawLen: 100, WireLen: 100},
		{Header: Header{Channel: 65535, Codec: CodecS2, Seq: 1<<64 - 1, Op: 1<<32 - 1, Segment: 1<<32 - 1},
			Flags: FlagChecksum, RawLen: 1 << 20, WireLen: 12345, PayloadCRC: 0xffffffff},
		{Header: Header{Channel: chanUser, Codec: CodecFP16}, Flags: FlagChecksum, RawLen: 8, WireLen: 4, PayloadCRC: 1},
		{Header: Header{Codec: CodecBF16}, RawLen: 4, WireLen: 2},
		{Header: Header{Codec: CodecZstd}, RawLen: 10, WireLen: 30},
	}
	for i, want := range cases {
		var b [FrameHeaderSize]byte
		MarshalFrameHeader(b[:], &want, tab)
		got, err := DecodeFrameHeader(3, 5, b[:], 1<<30, tab)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("case %d: got %+v, want %+v", i, got, want)
		}
	}
}

// corruptHeader returns a valid header for f with mutate applied and, when fixCRC, the header
// checksum recomputed so that a field check (not the checksum) has to catch the problem.
func corruptHeader(f FrameHeader, fixCRC bool, mutate func(b []byte)) []byte {
	tab := crcTable()
	b := make([]byte, FrameHeaderSize)
	MarshalFrameHeader(b, &f, tab)
	mutate(b)
	if fixCRC {
		binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], tab))
	}
	return b
}

func TestDecodeFrameHeaderErrors(t *testing.T) {
	good := FrameHeader{Header: Header{Seq: 9, Op: 3}, Flags: FlagChecksum, RawLen: 64, WireLen: 64, PayloadCRC: 77}
	with := func(mod func(f *FrameHeader)) FrameHeader { f := good; mod(&f); return f }
	none := func([]byte) {}
	cases := []struct {
		name   string
		b      []byte
		reason string
	}{
		{"short", make([]byte, 10), "header of 10 bytes"},
		{"magic", corruptHeader(good, true, func(b []byte) { b[0] = 'X' }), "bad magic"},
		{"version", corruptHeader(good, true, func(b []byte) { b[4] = 2 }), "frame version 2"},
		{"header checksum", corruptHeader(good, false, func(b []byte) { b[17] ^= 1 }), "header checksum"},
		{"reserved", corruptHeader(good, true, func(b []byte) { b[41] = 1 }), "reserved"},
		{"flags", corruptHeader(good, true, func(b []byte) { b[5] |= 0x80 }), "unknown flags"},
		{"crc without flag", corruptHeader(with(func(f *FrameHeader) { f.Flags = 0 }), true, none), "without the checksum flag"},
		{"raw too long", corruptHeader(with(func(f *FrameHeader) { f.RawLen, f.WireLen = 2000, 2000 }), true, none), "exceeds the 1024-byte message limit"},
		{"wire too long", corruptHeader(with(func(f *FrameHeader) { f.Codec, f.WireLen = CodecS2, 1<<31 }), true, none), "wire payload"},
		{"codec", corruptHeader(with(func(f *FrameHeader) { f.Codec = 9 }), true, none), "unknown codec 9"},
		{"none lengths", corruptHeader(with(func(f *FrameHeader) { f.WireLen = 63 }), true, none), "raw length 64 != wire length 63"},
		{"fp16 lengths", corruptHeader(with(func(f *FrameHeader) { f.Codec, f.WireLen = CodecFP16, 64 }), true, none), "16-bit float"},
		{"bf16 odd", corruptHeader(with(func(f *FrameHeader) { f.Codec, f.RawLen, f.WireLen = CodecBF16, 6, 3 }), true, none), "16-bit float"},
		{"empty mismatch", corruptHeader(with(func(f *FrameHeader) { f.Codec, f.RawLen, f.WireLen = CodecZstd, 0, 9 }), true, none), "empty payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeFrameHeader(2, 7, tc.b, 1024, crcTable())
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *FrameError", err)
			}
			if fe.Rank != 2 || fe.Peer != 7 {
				t.Fatalf("error names ranks %d/%d, want 2/7", fe.Rank, fe.Peer)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.reason) || !strings.Contains(msg, "rank 2") || !strings.Contains(msg, "rank 7") {
				t.Fatalf("error %q does not say %q and name both ranks", msg, tc.reason)
			}
		})
	}
}

func TestVerifyPayload(t *testing.T) {
	tab := crcTable()
	payload := []byte("the payload")
	f := FrameHeader{Flags: FlagChecksum, RawLen: uint32(len(payload)), WireLen: uint32(len(payload)),
		PayloadCRC: crc32.Checksum(payload, tab)}
	if err := VerifyPayload(0, 1, &f, payload, tab); err != nil {
		t.Fatal(err)
	}
	payload[3] ^= 0x10
	var fe *FrameError
	if err := VerifyPayload(0, 1, &f, payload, tab); !errors.As(err, &fe) || !strings.Contains(err.Error(), "payload checksum") {
		t.Fatalf("corrupted payload: got %v", err)
	}
	f.Flags, f.PayloadCRC = 0, 0
	if err := VerifyPayload(0, 1, &f, payload, tab); err != nil {
		t.Fatalf("frame without checksum: %v", err)
	}
}

// FuzzDecodeHeader checks that no input makes the decoder panic and that whatever it accepts
// re-encodes to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	tab := crcTable()
	seeds := []FrameHeader{
		{},
		{Header: Header{Channel: 3, Seq: 42, Op: 0x1234, Segment: 2}, Flags: FlagChecksum, RawLen: 16, WireLen: 16, PayloadCRC: 99},
		{Header: Header{Codec: CodecFP16}, RawLen: 8, WireLen: 4},
		{Header: Header{Codec: CodecS2}, RawLen: 1000, WireLen: 10},
	}
	for _, s := range seeds {
		b := make([]byte, FrameHeaderSize)
		MarshalFrameHeader(b, &s, tab)
		f.Add(b)
		f.Add(b[:20])
		c := append([]byte(nil), b...)
		c[30] ^= 0xff
		f.Add(c)
	}
	f.Add([]byte("HSYN"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeFrameHeader(0, 1, b, 1<<20, tab)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FrameError", err)
			}
			return
		}
		var out [FrameHeaderSize]byte
		MarshalFrameHeader(out[:], &h, tab)
		if string(out[:]) != string(b[:FrameHeaderSize]) {
			t.Fatalf("accepted header does not re-encode to its bytes")
		}
	})
}
