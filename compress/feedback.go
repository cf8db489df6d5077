package compress

import "fmt"

// Feedback is error feedback for one vector sent round after round under a lossy codec: each
// round it encodes the new values plus what earlier rounds' encodings lost, and keeps what
// this encoding loses for the next. Summed over rounds, what was sent differs from the sum of
// the true values only by the residual still held, at most one encoding's error, however long
// the run; without it a value below the codec's resolution would never be sent at all.
type Feedback struct {
	codec    Codec
	residual []float32
	decoded  []float32
}

// NewFeedback returns error feedback for vectors of n values under c, starting from a zero
// residual.
func NewFeedback(c Codec, n int) *Feedback {
	return &Feedback{codec: c, residual: make([]float32, n), decoded: make([]float32, n)}
}

// Codec is the codec the feedback encodes with.
func (f *Feedback) Codec() Codec { return f.codec }

// Encode writes into dst (EncodedLen(len(x)) bytes) the encoding of x plus the residual, and
// keeps the new residual: what the receiver will not see of x plus the old residual.
func (f *Feedback) Encode(dst []byte, x []float32) error {
	if len(x) != len(f.residual) {
		return fmt.Errorf("error feedback: %d values, it was made for %d", len(x), len(f.residual))
	}
	r := f.residual
	for i, v := range x {
		r[i] += v
	}
	f.codec.Encode(dst, r)
	if err := f.codec.Decode(f.decoded, dst); err != nil {
		return err
	}
	for i, d := range f.decoded {
		r[i] -= d
	}
	return nil
}

// Residual is what the sent values still owe the true ones. The slice is the feedback's own:
// a checkpoint copies it, SetResidual restores it.
func (f *Feedback) Residual() []float32 { return f.residual }

// SetResidual restores a residual saved from Residual (a resumed run continues exactly).
func (f *Feedback) SetResidual(r []float32) error {
	if len(r) != len(f.residual) {
		return fmt.Errorf("error feedback: a residual of %d values for vectors of %d", len(r), len(f.residual))
	}
	copy(f.residual, r)
	return nil
}
