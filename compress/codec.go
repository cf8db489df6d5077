package compress

import (
	"fmt"
	"strings"
	"unsafe"
)

// Codec encodes float32 vectors for the wire. Implementations are stateless values, safe for
// concurrent use.
type Codec interface {
	// Name is the codec's name as flags spell it ("fp16", "bf16", "int8", "none").
	Name() string
	// EncodedLen is the number of wire bytes n values encode to.
	EncodedLen(n int) int
	// Encode writes the encoding of src into dst, which must hold EncodedLen(len(src)) bytes.
	Encode(dst []byte, src []float32)
	// Decode writes the values src encodes into dst; src must be EncodedLen(len(dst)) bytes.
	Decode(dst []float32, src []byte) error
	// DecodeAdd adds the values src encodes to dst, in float32.
	DecodeAdd(dst []float32, src []byte) error
	// ErrorBound writes into bound, for each value of src, the largest difference between it
	// and what Encode then Decode give back.
	ErrorBound(bound, src []float32)
}

// Names lists the codecs Lookup knows, lossless first.
func Names() []string { return []string{"none", "bf16", "fp16", "int8"} }

// Lookup returns the codec of a name as flags spell it.
func Lookup(name string) (Codec, error) {
	switch name {
	case "none", "fp32", "":
		return None{}, nil
	case "fp16":
		return FP16{}, nil
	case "bf16":
		return BF16{}, nil
	case "int8":
		return Int8{}, nil
	}
	return nil, fmt.Errorf("unknown codec %q (known: %s)", name, strings.Join(Names(), ", "))
}

// checkLen is the error of a wire buffer that does not hold n values of codec c.
func checkLen(c Codec, n int, src []byte) error {
	if want := c.EncodedLen(n); len(src) != want {
		return fmt.Errorf("%s: %d wire bytes for %d values, want %d", c.Name(), len(src), n, want)
	}
	return nil
}

// bytesOf views v as its little-endian bytes.
func bytesOf(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// None sends float32 values as they are: the reference the lossy codecs are measured against.
type None struct{}

func (None) Name() string                     { return "none" }
func (None) EncodedLen(n int) int             { return 4 * n }
func (None) Encode(dst []byte, src []float32) { copy(dst, bytesOf(src)) }
func (c None) Decode(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	copy(bytesOf(dst), src)
	return nil
}
func (c None) DecodeAdd(dst []float32, src []byte) error {
	if err := checkLen(c, len(dst), src); err != nil {
		return err
	}
	for i := range dst {
		dst[i] += float32frombytes(src[4*i:])
	}
	return nil
}
func (None) ErrorBound(bound, src []float32) { clear(bound[:len(src)]) }
