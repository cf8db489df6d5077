package compress

import (
	"encoding/binary"
	"math"
)

// Int8Block is how many values share one scale under Int8: 4 bytes of scale per 256 values
// cost 1.6 % of the wire, and a block small enough that one large value does not flatten a
// whole tensor's small ones to zero.
const Int8Block = 256

// Int8 sends each block of Int8Block values as a float32 scale (the block's largest magnitude
// ÷ 127) and one signed byte per value, rounded to nearest: about a quarter of the bytes, an
// error of at most half the block's scale. A block holding NaN or ±Inf decodes to NaN
// throughout, so a diverged model is seen, never quietly clipped.
type Int8 struct{}

func (Int8) Name() string { return "int8" }

func (Int8) EncodedLen(n int) int { return n + 4*((n+Int8Block-1)/Int8Block) }

func (Int8) Encode(dst []byte, src []float32) {
	for len(src) > 0 {
		b := min(len(src), Int8Block)
		blk := src[:b]
		m := blockMax(blk)
		scale := m / 127
		switch {
		case !finite(m): // NaN or Inf in the block
			scale = float32(math.NaN())
			clear(dst[4 : 4+b])
		case m == 0:
			clear(dst[4 : 4+b])
		default:
			inv := 127 / m
			q := dst[4 : 4+b]
			for i, v := range blk {
				// |v*inv| ≤ 127 up to one rounding, so adding 1.5·2^23 leaves the nearest
				// integer (ties to even) in the low mantissa bits: a rounding without a
				// branch or a float-to-int conversion, and no clamp needed.
				q[i] = byte(math.Float32bits(v*inv+roundMagic) - roundMagicBits)
			}
		}
		binary.LittleEndian.PutUint32(dst, math.Float32bits(scale))
		dst, src = dst[4+b:], src[b:]
	}
}

func (c Int8) Decode(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	for len(dst) > 0 {
		b := min(len(dst), Int8Block)
		scale := float32frombytes(src)
		for i, q := range src[4 : 4+b] {
			dst[i] = float32(int8(q)) * scale
		}
		dst, src = dst[b:], src[4+b:]
	}
	return nil
}

func (c Int8) DecodeAdd(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	for len(dst) > 0 {
		b := min(len(dst), Int8Block)
		scale := float32frombytes(src)
		d := dst[:b]
		for i, q := range src[4 : 4+b] {
			d[i] += float32(int8(q)) * scale
		}
		dst, src = dst[b:], src[4+b:]
	}
	return nil
}

// ErrorBound: half the block's scale, with room for the float32 roundings of the scale, the
// product and the decode (each 2^-24 relative).
func (Int8) ErrorBound(bound, src []float32) {
	for len(src) > 0 {
		b := min(len(src), Int8Block)
		m := blockMax(src[:b])
		e := float32(float64(m) / 127 * (0.5 + 1.0/(1<<16)))
		if !finite(m) {
			e = float32(math.Inf(1))
		}
		for i := range bound[:b] {
			bound[i] = e
		}
		bound, src = bound[b:], src[b:]
	}
}

// blockMax is the largest magnitude of a block; NaN when the block holds one (max keeps NaN).
func blockMax(blk []float32) float32 {
	var m float32
	for _, v := range blk {
		m = max(m, abs32(v))
	}
	return m
}

// finite says whether a block's largest magnitude is neither NaN nor Inf.
func finite(m float32) bool { return m == m && m <= math.MaxFloat32 }

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

const (
	roundMagic     = 12582912 // 1.5·2^23
	roundMagicBits = 0x4b400000
)
