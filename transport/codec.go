package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

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
			Float32ToFP16(dst, src)
		} else {
			Float32ToBF16(dst, src)
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
			FP16ToFloat32(dst, src)
		} else {
			BF16ToFloat32(dst, src)
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

// Float32ToFP16 converts the little-endian float32 values of src to IEEE binary16 in dst,
// rounding to nearest even. Overflow becomes ±Inf, NaN stays NaN. len(dst) must be at least
// len(src)/2.
func Float32ToFP16(dst, src []byte) {
	n := len(src) / 4
	dst = dst[:2*n]
	src = src[:4*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		s := src[4*i : 4*i+16]
		a, b := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		u0, u1, u2, u3 := uint32(a), uint32(a>>32), uint32(b), uint32(b>>32)
		var h uint64
		if fp16IsNormal(u0) && fp16IsNormal(u1) && fp16IsNormal(u2) && fp16IsNormal(u3) {
			h = uint64(fp16Normal(u0)) | uint64(fp16Normal(u1))<<16 | uint64(fp16Normal(u2))<<32 | uint64(fp16Normal(u3))<<48
		} else {
			h = uint64(f32ToF16(u0)) | uint64(f32ToF16(u1))<<16 | uint64(f32ToF16(u2))<<32 | uint64(f32ToF16(u3))<<48
		}
		binary.LittleEndian.PutUint64(dst[2*i:], h)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], f32ToF16(binary.LittleEndian.Uint32(src[4*i:])))
	}
}

// fp16IsNormal reports whether float32 bits u round to a normal binary16 value.
func fp16IsNormal(u uint32) bool { return u&0x7fffffff-f16MinNormal < f16MaxAbove-f16MinNormal }

// fp16Normal is f32ToF16 for values that fp16IsNormal accepts.
func fp16Normal(u uint32) uint16 {
	a := u & 0x7fffffff
	return uint16(u>>16)&0x8000 | uint16((a-(127-15)<<23+0xfff+(a>>13)&1)>>13)
}

// Float32ToBF16 converts the little-endian float32 values of src to bfloat16 in dst, rounding
// to nearest even; NaN stays NaN.
func Float32ToBF16(dst, src []byte) {
	n := len(src) / 4
	dst = dst[:2*n]
	src = src[:4*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		s := src[4*i : 4*i+16]
		a, b := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		h := uint64(f32ToBF16(uint32(a))) | uint64(f32ToBF16(uint32(a>>32)))<<16 |
			uint64(f32ToBF16(uint32(b)))<<32 | uint64(f32ToBF16(uint32(b>>32)))<<48
		binary.LittleEndian.PutUint64(dst[2*i:], h)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(dst[2*i:], f32ToBF16(binary.LittleEndian.Uint32(src[4*i:])))
	}
}

// FP16ToFloat32 widens the binary16 values of src to little-endian float32 in dst (exact).
func FP16ToFloat32(dst, src []byte) {
	n := len(src) / 2
	dst = dst[:4*n]
	src = src[:2*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		v := binary.LittleEndian.Uint64(src[2*i:])
		h0, h1, h2, h3 := uint16(v), uint16(v>>16), uint16(v>>32), uint16(v>>48)
		d := dst[4*i : 4*i+16]
		if f16IsNormal(h0) && f16IsNormal(h1) && f16IsNormal(h2) && f16IsNormal(h3) {
			binary.LittleEndian.PutUint64(d, uint64(f16Normal(h0))|uint64(f16Normal(h1))<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(f16Normal(h2))|uint64(f16Normal(h3))<<32)
		} else {
			binary.LittleEndian.PutUint64(d, uint64(f16ToF32(h0))|uint64(f16ToF32(h1))<<32)
			binary.LittleEndian.PutUint64(d[8:], uint64(f16ToF32(h2))|uint64(f16ToF32(h3))<<32)
		}
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], f16ToF32(binary.LittleEndian.Uint16(src[2*i:])))
	}
}

// f16IsNormal reports whether binary16 bits h are a normal number (not zero, subnormal, Inf
// or NaN).
func f16IsNormal(h uint16) bool { return (h&0x7c00)-0x0400 < 0x7800 }

// f16Normal is f16ToF32 for values that f16IsNormal accepts.
func f16Normal(h uint16) uint32 {
	return uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + (127-15)<<23)
}

// BF16ToFloat32 widens the bfloat16 values of src to little-endian float32 in dst (exact).
func BF16ToFloat32(dst, src []byte) {
	n := len(src) / 2
	dst = dst[:4*n]
	src = src[:2*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		v := binary.LittleEndian.Uint64(src[2*i:])
		d := dst[4*i : 4*i+16]
		binary.LittleEndian.PutUint64(d, (v&0xffff)<<16|(v&0xffff0000)<<32)
		binary.LittleEndian.PutUint64(d[8:], (v>>32&0xffff)<<16|(v>>48)<<48)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
	}
}

func f32ToBF16(u uint32) uint16 {
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it a quiet NaN
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

const (
	f32Inf       = 0x7f800000
	f16MaxAbove  = 0x477ff000 // 65520: the smallest float32 that rounds to +Inf in binary16
	f16MinNormal = 0x38800000 // 2^-14
	halfBits     = 0x3f000000 // 0.5: adding it lines a subnormal's bits up with binary16's
)

func f32ToF16(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a >= f16MaxAbove:
		if a > f32Inf {
			return sign | 0x7e00 | uint16(a>>13)&0x3ff // quiet NaN, keep payload bits
		}
		return sign | 0x7c00
	case a < f16MinNormal:
		// Subnormal or zero: the FPU does the round-to-nearest-even for us when the value is
		// added to 0.5, whose ulp is exactly binary16's smallest subnormal (2^-24).
		r := math.Float32bits(float32(math.Float32frombits(a)+math.Float32frombits(halfBits))) - halfBits
		return sign | uint16(r)
	default:
		odd := (a >> 13) & 1
		a = a - (127-15)<<23 + 0xfff + odd
		return sign | uint16(a>>13)
	}
}

func f16ToF32(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if mant == 0 {
			return sign
		}
		// Subnormal: mant * 2^-24 is exact in float32.
		return sign | math.Float32bits(float32(mant)*(1.0/(1<<24)))
	case 0x1f:
		return sign | f32Inf | mant<<13
	}
	return sign | (exp+(127-15))<<23 | mant<<13
}
