package compress

import (
	"encoding/binary"
	"math"
)

func float32frombytes(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// FP16 sends IEEE binary16 values, rounded to nearest even: half the bytes, a relative error
// of at most 2^-11 in fp16's normal range.
type FP16 struct{}

func (FP16) Name() string                     { return "fp16" }
func (FP16) EncodedLen(n int) int             { return 2 * n }
func (FP16) Encode(dst []byte, src []float32) { Float32ToFP16(dst, bytesOf(src)) }
func (c FP16) Decode(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	FP16ToFloat32(bytesOf(dst), src)
	return nil
}
func (c FP16) DecodeAdd(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	for i := range dst {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if f16IsNormal(h) {
			dst[i] += math.Float32frombits(f16Normal(h))
		} else {
			dst[i] += math.Float32frombits(f16ToF32(h))
		}
	}
	return nil
}

// ErrorBound: half an fp16 ulp, 2^-11 of the value (2^-25 absolute among fp16's subnormals);
// values that overflow fp16 become ±Inf, an unbounded error.
func (FP16) ErrorBound(bound, src []float32) {
	for i, v := range src {
		a := math.Abs(float64(v))
		switch {
		case a >= 65520 || math.IsNaN(a):
			bound[i] = float32(math.Inf(1))
		default:
			bound[i] = float32(max(a/(1<<11), 1.0/(1<<25)))
		}
	}
}

// BF16 sends bfloat16 values (float32's exponent, 8 bits of mantissa), rounded to nearest
// even: half the bytes, float32's range, a relative error of at most 2^-8.
type BF16 struct{}

func (BF16) Name() string                     { return "bf16" }
func (BF16) EncodedLen(n int) int             { return 2 * n }
func (BF16) Encode(dst []byte, src []float32) { Float32ToBF16(dst, bytesOf(src)) }
func (c BF16) Decode(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	BF16ToFloat32(bytesOf(dst), src)
	return nil
}
func (c BF16) DecodeAdd(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	for i := range dst {
		dst[i] += math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
	return nil
}

// ErrorBound: half a bf16 ulp, at most 2^-8 of the value (values within half an ulp of
// float32's largest round to ±Inf).
func (BF16) ErrorBound(bound, src []float32) {
	for i, v := range src {
		a := math.Abs(float64(v))
		if a >= 0x1.ffp127 || math.IsNaN(a) {
			bound[i] = float32(math.Inf(1))
			continue
		}
		bound[i] = float32(a / (1 << 8))
	}
}
