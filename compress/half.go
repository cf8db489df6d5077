package compress

import (
	"encoding/binary"
	"math"
)

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
