package compress

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func TestFP16Values(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65519.99, 0x7bff},
		{65520, 0x7c00}, // halfway to the next power: rounds to even, which is Inf
		{1e6, 0x7c00},
		{-inf, 0xfc00},
		{1.0 / (1 << 14), 0x0400},               // smallest normal
		{1.0 / (1 << 24), 0x0001},               // smallest subnormal
		{1.0 / (1 << 25), 0x0000},               // half of it: tie, rounds to even (0)
		{1.5 / (1 << 24), 0x0002},               // tie between 1 and 2 ulp: even is 2
		{2.5 / (1 << 24), 0x0002},               // tie between 2 and 3: even is 2
		{1 + 1.0/(1<<11), 0x3c00},               // tie between 1 and 1+2^-10: even is 1
		{1 + 3.0/(1<<11), 0x3c02},               // tie between 1+2^-10 and 1+2^-9: even
		{1 + 1.0/(1<<11) + 1.0/(1<<20), 0x3c01}, // just above the tie
		{0.1, 0x2e66},
	}
	for _, tc := range cases {
		if got := f32ToF16(math.Float32bits(tc.in)); got != tc.want {
			t.Errorf("fp16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	nan := f32ToF16(math.Float32bits(float32(math.NaN())))
	if nan&0x7c00 != 0x7c00 || nan&0x3ff == 0 {
		t.Errorf("fp16(NaN) = %#04x, not a NaN", nan)
	}
}

// TestFP16Exhaustive widens every binary16 value and narrows it back, and checks that random
// float32 values land on the nearest binary16 neighbour (ties to even).
func TestFP16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := f16ToF32(uint16(h))
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if !math.IsNaN(float64(math.Float32frombits(f))) {
				t.Fatalf("fp16 NaN %#04x widened to %v", h, math.Float32frombits(f))
			}
			continue
		}
		if back := f32ToF16(f); back != uint16(h) {
			t.Fatalf("fp16 %#04x -> %g -> %#04x", h, math.Float32frombits(f), back)
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	val := func(h uint16) float64 { return float64(math.Float32frombits(f16ToF32(h))) }
	for i := 0; i < 200000; i++ {
		u := r.Uint32()
		x := math.Float32frombits(u)
		if math.IsNaN(float64(x)) || math.Abs(float64(x)) >= 65520 {
			continue
		}
		h := f32ToF16(u)
		d := math.Abs(float64(x) - val(h))
		for _, nb := range []uint16{h + 1, h - 1} {
			if nb&0x7fff >= 0x7c00 || (h&0x7fff == 0 && nb == h-1) {
				continue
			}
			dn := math.Abs(float64(x) - val(nb))
			if dn < d || (dn == d && h&1 == 1) {
				t.Fatalf("fp16(%g) = %#04x (%g), but %#04x (%g) is nearer or the even tie", x, h, val(h), nb, val(nb))
			}
		}
	}
}

func TestBF16Values(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above the tie
		{0x7f7fffff, 0x7f80}, // max float rounds to Inf
		{0xff800000, 0xff80}, // -Inf
		{0x80000000, 0x8000}, // -0
	}
	for _, tc := range cases {
		if got := f32ToBF16(tc.in); got != tc.want {
			t.Errorf("bf16(%#08x) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if nan := f32ToBF16(0x7f800001); nan&0x7f80 != 0x7f80 || nan&0x7f == 0 {
		t.Errorf("bf16(NaN) = %#04x, not a NaN", nan)
	}
}

// TestFloatSliceConvertersMatchScalar checks the inlined fast paths and unrolled loops of the
// slice converters against the scalar conversions, on every binary16 value widened, on random
// bit patterns and on lengths that leave a tail.
func TestFloatSliceConvertersMatchScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	var vals []uint32
	for h := 0; h < 1<<16; h++ {
		vals = append(vals, f16ToF32(uint16(h)), f16ToF32(uint16(h))+1, f16ToF32(uint16(h))-1)
	}
	for i := 0; i < 100000; i++ {
		vals = append(vals, r.Uint32())
	}
	vals = vals[:len(vals)-1] // not a multiple of 4 values
	src := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(src[4*i:], v)
	}
	half := make([]byte, len(src)/2)
	wide := make([]byte, len(src))
	Float32ToFP16(half, src)
	FP16ToFloat32(wide, half)
	for i, v := range vals {
		h := binary.LittleEndian.Uint16(half[2*i:])
		if want := f32ToF16(v); h != want {
			t.Fatalf("Float32ToFP16(%#08x) = %#04x, scalar gives %#04x", v, h, want)
		}
		if got, want := binary.LittleEndian.Uint32(wide[4*i:]), f16ToF32(h); got != want {
			t.Fatalf("FP16ToFloat32(%#04x) = %#08x, scalar gives %#08x", h, got, want)
		}
	}
	Float32ToBF16(half, src)
	BF16ToFloat32(wide, half)
	for i, v := range vals {
		h := binary.LittleEndian.Uint16(half[2*i:])
		if want := f32ToBF16(v); h != want {
			t.Fatalf("Float32ToBF16(%#08x) = %#04x, scalar gives %#04x", v, h, want)
		}
		if got := binary.LittleEndian.Uint32(wide[4*i:]); got != uint32(h)<<16 {
			t.Fatalf("BF16ToFloat32(%#04x) = %#08x", h, got)
		}
	}
}
