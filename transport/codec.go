package transport

import (
	"errors"
	"fmt"

	"github.com/hetsync/hetsync/compress"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// String names the codec as flags and logs spell it.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	case CodecFP16:
		return "fp16"
	case CodecBF16:
		return "bf16"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Known reports whether c is a codec this build implements.
func (c Codec) Known() bool { return c <= CodecBF16 }

// Lossy reports whether the receiver may get other bytes than the sender's.
func (c Codec) Lossy() bool { return c == CodecFP16 || c == CodecBF16 }

// PayloadCodec encodes and decodes payloads, reusing its zstd encoder and decoder and never
// allocating per message once the destination buffers have grown. One PayloadCodec serves one
// direction of one link; it is not safe for concurrent use.
type PayloadCodec struct {
	maxMessage int
	zenc       *zstd.Encoder
	zdec       *zstd.Decoder
}

// NewPayloadCodec returns a codec whose decoders refuse payloads that decode to more than
// maxMessage bytes (0 means MaxFrameLen).
func NewPayloadCodec(maxMessage int) *PayloadCodec {
	if maxMessage <= 0 || maxMessage > MaxFrameLen {
		maxMessage = MaxFrameLen
	}
	return &PayloadCodec{maxMessage: maxMessage}
}

// Close releases the zstd state.
func (c *PayloadCodec) Close() {
	if c.zenc != nil {
		c.zenc.Close()
		c.zenc = nil
	}
	if c.zdec != nil {
		c.zdec.Close()
		c.zdec = nil
	}
}

var errNotFloat32 = errors.New("payload length is not a multiple of 4, so it is not float32 data")

// MaxEncodedLen is an upper bound of the wire length of an n-byte payload under codec.
func MaxEncodedLen(codec Codec, n int) int {
	switch codec {
	case CodecS2:
		return s2.MaxEncodedLen(n)
	case CodecZstd:
		// zstd never expands by more than a block header per 128 KiB block plus the frame
		// header; be generous.
		return n + n/512 + 64
	case CodecFP16, CodecBF16:
		return n / 2
	}
	return n
}

// Encode encodes src with codec into dst's backing array (grown when too small) and returns the
// wire bytes. An empty src encodes to an empty payload for every codec.
func (c *PayloadCodec) Encode(codec Codec, dst, src []byte) ([]byte, error) {
	if len(src) == 0 {
		return dst[:0], nil
	}
	switch codec {
	case CodecNone:
		return append(dst[:0], src...), nil
	case CodecS2:
		n := s2.MaxEncodedLen(len(src))
		if n < 0 {
			return nil, fmt.Errorf("s2: payload of %d bytes is too large", len(src))
		}
		if cap(dst) < n {
			dst = make([]byte, n)
		}
		return s2.Encode(dst[:cap(dst)], src), nil
	case CodecZstd:
		if c.zenc == nil {
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false),
				zstd.WithEncoderLevel(zstd.SpeedFastest))
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			c.zenc = enc
		}
		return c.zenc.EncodeAll(src, dst[:0]), nil
	case CodecFP16, CodecBF16:
		if len(src)%4 != 0 {
			return nil, fmt.Errorf("%v: %d bytes: %w", codec, len(src), errNotFloat32)
		}
		n := len(src) / 2
		if cap(dst) < n {
			dst = make([]byte, n)
		}
		dst = dst[:n]
		if codec == CodecFP16 {
			compress.Float32ToFP16(dst, src)
		} else {
			compress.Float32ToBF16(dst, src)
		}
		return dst, nil
	}
	return nil, fmt.Errorf("unknown codec %d", codec)
}

// Decode decodes the wire bytes src of codec into dst, whose length must be the raw payload
// length the frame announced; a payload that decodes to any other length is an error.
func (c *PayloadCodec) Decode(codec Codec, dst, src []byte) error {
	if len(src) == 0 || len(dst) == 0 {
		if len(src) != len(dst) {
			return fmt.Errorf("%v: %d wire bytes for a %d-byte payload", codec, len(src), len(dst))
		}
		return nil
	}
	switch codec {
	case CodecNone:
		if len(src) != len(dst) {
			return fmt.Errorf("none: %d wire bytes for a %d-byte payload", len(src), len(dst))
		}
		copy(dst, src)
		return nil
	case CodecS2:
		n, err := s2.DecodedLen(src)
		if err != nil {
			return fmt.Errorf("s2: %w", err)
		}
		if n != len(dst) {
			return fmt.Errorf("s2: payload decodes to %d bytes, frame says %d", n, len(dst))
		}
		out, err := s2.Decode(dst, src)
		if err != nil {
			return fmt.Errorf("s2: %w", err)
		}
		if len(out) != len(dst) || &out[0] != &dst[0] {
			return fmt.Errorf("s2: payload decodes to %d bytes, frame says %d", len(out), len(dst))
		}
		return nil
	case CodecZstd:
		if c.zdec == nil {
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(uint64(max(c.maxMessage, 1<<20))), zstd.WithDecodeAllCapLimit(true))
			if err != nil {
				return fmt.Errorf("zstd: %w", err)
			}
			c.zdec = dec
		}
		out, err := c.zdec.DecodeAll(src, dst[:0])
		if err != nil {
			return fmt.Errorf("zstd: %w", err)
		}
		if len(out) != len(dst) || &out[0] != &dst[0] {
			return fmt.Errorf("zstd: payload decodes to %d bytes, frame says %d", len(out), len(dst))
		}
		return nil
	case CodecFP16, CodecBF16:
		if len(dst) != 2*len(src) || len(dst)%4 != 0 {
			return fmt.Errorf("%v: %d wire bytes for a %d-byte payload", codec, len(src), len(dst))
		}
		if codec == CodecFP16 {
			compress.FP16ToFloat32(dst, src)
		} else {
			compress.BF16ToFloat32(dst, src)
		}
		return nil
	}
	return fmt.Errorf("unknown codec %d", codec)
}

// EncodePayload encodes src with codec into a new slice. Convenient, but allocates; hot paths
// use a PayloadCodec.
func EncodePayload(codec Codec, src []byte) ([]byte, error) {
	c := NewPayloadCodec(0)
	defer c.Close()
	return c.Encode(codec, nil, src)
}

// DecodePayload decodes wire bytes of codec into a new rawLen-byte slice.
func DecodePayload(codec Codec, src []byte, rawLen int) ([]byte, error) {
	if rawLen < 0 || rawLen > MaxFrameLen {
		return nil, fmt.Errorf("%v: raw length %d out of range", codec, rawLen)
	}
	c := NewPayloadCodec(rawLen)
	defer c.Close()
	dst := make([]byte, rawLen)
	if err := c.Decode(codec, dst, src); err != nil {
		return nil, err
	}
	return dst, nil
}
