package compress

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// vector returns n values shaped like a gradient, with the awkward ones mixed in: zeros,
// both signs, a few far larger than the rest (so int8 blocks have an outlier), fp16
// subnormals.
func vector(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(50) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = float32(r.NormFloat64() * 30)
		case 2:
			v[i] = float32(r.NormFloat64() * 1e-7)
		default:
			v[i] = float32(r.NormFloat64() * 1e-3)
		}
	}
	return v
}

func codecs(t testing.TB) []Codec {
	var cs []Codec
	for _, name := range Names() {
		c, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// TestCodecsWithinBound: every codec gives back every value within its stated bound, on
// lengths around the int8 block, and DecodeAdd adds exactly what Decode gives.
func TestCodecsWithinBound(t *testing.T) {
	for _, c := range codecs(t) {
		for _, n := range []int{0, 1, 2, 7, Int8Block - 1, Int8Block, Int8Block + 1, 1000, 4099} {
			x := vector(n, uint64(n)+1)
			wire := make([]byte, c.EncodedLen(n))
			c.Encode(wire, x)
			got := make([]float32, n)
			if err := c.Decode(got, wire); err != nil {
				t.Fatalf("%s n=%d: %v", c.Name(), n, err)
			}
			bound := make([]float32, n)
			c.ErrorBound(bound, x)
			for i := range x {
				if d := math.Abs(float64(got[i]) - float64(x[i])); d > float64(bound[i]) {
					t.Fatalf("%s n=%d value %d: %g came back as %g, error %g over the bound %g", c.Name(), n, i, x[i], got[i], d, bound[i])
				}
			}
			acc := vector(n, 99)
			want := make([]float32, n)
			for i := range acc {
				want[i] = acc[i] + got[i]
			}
			if err := c.DecodeAdd(acc, wire); err != nil {
				t.Fatalf("%s n=%d: %v", c.Name(), n, err)
			}
			for i := range acc {
				if math.Float32bits(acc[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s n=%d value %d: DecodeAdd gave %g, Decode then add %g", c.Name(), n, i, acc[i], want[i])
				}
			}
		}
	}
}

// TestCodecSizes: the wire sizes the codecs promise.
func TestCodecSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{
		{"none", 1000, 4000}, {"fp16", 1000, 2000}, {"bf16", 1000, 2000},
		{"int8", 1000, 1000 + 4*4}, {"int8", Int8Block, Int8Block + 4}, {"int8", 0, 0},
	} {
		c, _ := Lookup(tc.name)
		if got := c.EncodedLen(tc.n); got != tc.want {
			t.Errorf("%s: %d values encode to %d bytes, want %d", tc.name, tc.n, got, tc.want)
		}
	}
}

// TestCodecErrors: a wire buffer of the wrong length is refused with the codec and both
// lengths named, for Decode and DecodeAdd; an unknown name lists the known ones.
func TestCodecErrors(t *testing.T) {
	for _, c := range codecs(t) {
		dst := make([]float32, 10)
		bad := make([]byte, c.EncodedLen(10)+1)
		for what, err := range map[string]error{"Decode": c.Decode(dst, bad), "DecodeAdd": c.DecodeAdd(dst, bad)} {
			if err == nil || !strings.Contains(err.Error(), c.Name()) || !strings.Contains(err.Error(), "10 values") {
				t.Errorf("%s %s of a short buffer: %v", c.Name(), what, err)
			}
		}
	}
	if _, err := Lookup("int4"); err == nil || !strings.Contains(err.Error(), "int8") {
		t.Errorf("Lookup(int4) = %v, want an error listing the codecs", err)
	}
}

// TestInt8NonFinite: a block holding NaN or Inf decodes to NaN throughout, its neighbours
// exactly as without it.
func TestInt8NonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		x := vector(3*Int8Block, 3)
		clean := append([]float32(nil), x...)
		x[Int8Block+5] = bad
		var c Int8
		wire, wireClean := make([]byte, c.EncodedLen(len(x))), make([]byte, c.EncodedLen(len(x)))
		c.Encode(wire, x)
		c.Encode(wireClean, clean)
		got, gotClean := make([]float32, len(x)), make([]float32, len(x))
		_ = c.Decode(got, wire)
		_ = c.Decode(gotClean, wireClean)
		for i := range got {
			inBad := i >= Int8Block && i < 2*Int8Block
			if inBad != math.IsNaN(float64(got[i])) || (!inBad && got[i] != gotClean[i]) {
				t.Fatalf("%g at %d: value %d decoded to %g (clean %g)", bad, Int8Block+5, i, got[i], gotClean[i])
			}
		}
	}
}

// TestFeedbackKeepsTheSum sends a long fixed sequence of vectors under each lossy codec with
// error feedback: the sum of what was sent stays within one encoding's error of the sum of the
// true values, however many rounds. Without feedback, values below the codec's resolution
// beside a large one are never sent, and the sum drifts away by thousands of steps.
func TestFeedbackKeepsTheSum(t *testing.T) {
	const n, rounds = 600, 4000
	for _, c := range []Codec{FP16{}, BF16{}, Int8{}} {
		r := rand.New(rand.NewPCG(11, 11))
		fb := NewFeedback(c, n)
		wire := make([]byte, c.EncodedLen(n))
		sent, truth := make([]float64, n), make([]float64, n)
		plain := make([]float64, n) // sent without feedback
		x, dec := make([]float32, n), make([]float32, n)
		bound := make([]float32, n)
		for k := 0; k < rounds; k++ {
			for i := range x {
				x[i] = float32(1e-3 + r.NormFloat64()*1e-3)
				if i%Int8Block == 0 {
					x[i] = 1 // a large value in every block
				}
				truth[i] += float64(x[i])
			}
			c.Encode(wire, x)
			_ = c.Decode(dec, wire)
			for i, d := range dec {
				plain[i] += float64(d)
			}
			if k == rounds-1 {
				for i := range x {
					bound[i] = x[i] + fb.Residual()[i] // what the last round encodes
				}
				c.ErrorBound(bound, bound)
			}
			if err := fb.Encode(wire, x); err != nil {
				t.Fatal(err)
			}
			_ = c.Decode(dec, wire)
			for i, d := range dec {
				sent[i] += float64(d)
			}
		}
		// What is still owed is the residual, at most the last encoding's error.
		worstPlain := 0.0
		for i := range sent {
			// float32 roundings of the residual's additions walk at random: allow 1% of a step.
			if d := math.Abs(sent[i] - truth[i]); d > 1.01*float64(bound[i]) {
				t.Fatalf("%s value %d after %d rounds: sent %g in all, true sum %g, off by %g, more than one step %g",
					c.Name(), i, rounds, sent[i], truth[i], d, bound[i])
			}
			worstPlain = max(worstPlain, math.Abs(plain[i]-truth[i])/float64(bound[i]))
		}
		if c.Name() == "int8" && worstPlain < 100 {
			t.Errorf("int8 without feedback drifted only %.1f steps: the sequence does not test feedback", worstPlain)
		}
		t.Logf("%s: without feedback the sum drifts up to %.1f steps", c.Name(), worstPlain)
	}
}

// TestFeedbackResumes: a feedback restored from a saved residual sends exactly the bytes the
// original sends from then on.
func TestFeedbackResumes(t *testing.T) {
	const n = 1000
	c := Int8{}
	a := NewFeedback(c, n)
	wa, wb := make([]byte, c.EncodedLen(n)), make([]byte, c.EncodedLen(n))
	for k := 0; k < 5; k++ {
		_ = a.Encode(wa, vector(n, uint64(k)))
	}
	b := NewFeedback(c, n)
	if err := b.SetResidual(append([]float32(nil), a.Residual()...)); err != nil {
		t.Fatal(err)
	}
	for k := 5; k < 10; k++ {
		_ = a.Encode(wa, vector(n, uint64(k)))
		_ = b.Encode(wb, vector(n, uint64(k)))
		if !bytes.Equal(wa, wb) {
			t.Fatalf("round %d: the restored feedback sent other bytes", k)
		}
	}
	if err := b.SetResidual(make([]float32, n+1)); err == nil {
		t.Error("a residual of the wrong length was accepted")
	}
	if err := b.Encode(wb, make([]float32, 3)); err == nil {
		t.Error("a vector of the wrong length was accepted")
	}
}

// BenchmarkCodecs is the cost per float32 byte of each codec's encode and of its decode into a
// float32 sum, against the plain float32 addition a reduction does anyway (none/decode-add).
func BenchmarkCodecs(b *testing.B) {
	const n = 1 << 20
	x := vector(n, 1)
	acc := make([]float32, n)
	b.Run("fp32-add", func(b *testing.B) { // the reduction every codec's decode-add replaces
		b.SetBytes(4 * n)
		for b.Loop() {
			for i, v := range x {
				acc[i] += v
			}
		}
	})
	for _, c := range codecs(b) {
		wire := make([]byte, c.EncodedLen(n))
		c.Encode(wire, x)
		b.Run(c.Name()+"/encode", func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				c.Encode(wire, x)
			}
		})
		b.Run(c.Name()+"/decode-add", func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				_ = c.DecodeAdd(acc, wire)
			}
		})
	}
}
