package optim

import (
	"encoding/binary"
	"math"
)

// appendFloats appends v as little-endian float32 bits, the encoding of every vector of an
// optimizer's state.
func appendFloats(b []byte, v []float32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// readFloats appends the float32 values of b (len(b)/4 of them) to dst.
func readFloats(dst []float32, b []byte) []float32 {
	for i := 0; i+4 <= len(b); i += 4 {
		dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return dst
}
