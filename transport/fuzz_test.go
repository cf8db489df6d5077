package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// FuzzStreamRecv feeds a peer's byte stream to a stream endpoint: whatever the bytes (frames
// with any header, lengths, codec and payload, cut anywhere), Recv returns, with a message or
// with an error that names both ranks, and it never panics. The stream ends after the bytes,
// so a Recv that does not return is a hang.
func FuzzStreamRecv(f *testing.F) {
	tab := crcTable()
	good := rawFrame(Header{Seq: 1}, payloadOf(100, 3))
	f.Add(good)
	f.Add(good[:20])
	f.Add(good[:FrameHeaderSize+50])
	f.Add(append(append([]byte(nil), good...), good...))
	f.Add(rawFrame(Header{Seq: 2, Channel: 3, Op: 7}, nil))
	for _, c := range []struct {
		codec   Codec
		raw     uint32
		payload []byte
	}{
		{CodecS2, 100, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3}},
		{CodecS2, 5000, []byte{100, 0, 1, 2, 3}},
		{CodecZstd, 100, []byte("definitely not a zstd frame")},
		{CodecFP16, 8, []byte{1, 2, 3, 4}},
		{CodecNone, 1 << 30, nil},
	} {
		h := FrameHeader{Header: Header{Codec: c.codec}, RawLen: c.raw, WireLen: uint32(len(c.payload))}
		b := make([]byte, FrameHeaderSize)
		MarshalFrameHeader(b, &h, tab)
		f.Add(append(b, c.payload...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ep, raw := rawPeer(t, "pipe", DefaultStreamOptions())
		go func() {
			raw.Write(b)
			raw.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		buf := make([]byte, 4096)
		for range 3 {
			_, err := ep.Recv(ctx, 1, Header{Seq: 1}, buf)
			if err == nil {
				continue
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Recv did not return after the stream ended: %v", err)
			}
			var fe *FrameError
			var pe *PeerError
			switch {
			case errors.As(err, &fe) && (fe.Rank != 0 || fe.Peer != 1):
				t.Fatalf("frame error names ranks %d and %d, want 0 and 1: %v", fe.Rank, fe.Peer, err)
			case errors.As(err, &pe) && (pe.Rank != 0 || pe.Peer != 1):
				t.Fatalf("peer error names ranks %d and %d, want 0 and 1: %v", pe.Rank, pe.Peer, err)
			}
			return
		}
	})
}
