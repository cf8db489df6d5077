package collective

import (
	"fmt"
	"unsafe"
)

// DType is the element type of a buffer.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case Float32:
		return "float"
	case Float64:
		return "double"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ReduceOp is how values from different ranks combine.
type ReduceOp uint8

// Reductions.
const (
	Sum ReduceOp = iota + 1
	Avg
	Min
	Max
	Prod
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Min:
		return "min"
	case Max:
		return "max"
	case Prod:
		return "prod"
	}
	return fmt.Sprintf("redop(%d)", uint8(o))
}

// Buffer is a typed view of memory that a collective reads and writes in place. It aliases the
// caller's slice: no copy is made.
type Buffer struct {
	DType DType
	Bytes []byte
}

// Len is the number of elements.
func (b Buffer) Len() int {
	if b.DType.Size() == 0 {
		return 0
	}
	return len(b.Bytes) / b.DType.Size()
}

// Slice returns elements [lo, hi) as a Buffer over the same memory.
func (b Buffer) Slice(lo, hi int) Buffer {
	s := b.DType.Size()
	return Buffer{DType: b.DType, Bytes: b.Bytes[lo*s : hi*s]}
}

func asBytes[T any](x []T) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(z)))
}

// F32 views a []float32 as a Buffer.
func F32(x []float32) Buffer { return Buffer{DType: Float32, Bytes: asBytes(x)} }

// F64 views a []float64 as a Buffer.
func F64(x []float64) Buffer { return Buffer{DType: Float64, Bytes: asBytes(x)} }

// I32 views a []int32 as a Buffer.
func I32(x []int32) Buffer { return Buffer{DType: Int32, Bytes: asBytes(x)} }

// I64 views a []int64 as a Buffer.
func I64(x []int64) Buffer { return Buffer{DType: Int64, Bytes: asBytes(x)} }

// Partition returns the half-open element range [lo, hi) that rank i of p owns when n elements
// are split as evenly as possible: the first n mod p ranks own one element more. ReduceScatter
// leaves rank i's reduced block there and AllGather takes it from there.
func Partition(n, p, i int) (lo, hi int) {
	q, r := n/p, n%p
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}
