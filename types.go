package hetsync

import "github.com/hetsync/hetsync/collective"

// The collectives' argument types, so that a program needs no other package for them.
type (
	// Buffer is a typed view of memory that a collective reads and writes in place.
	Buffer = collective.Buffer
	// ReduceOp is how values from different ranks combine.
	ReduceOp = collective.ReduceOp
	// DType is the element type of a Buffer.
	DType = collective.DType
)

// ErrClosed is what every call on a Comm fails with (wrapped with the rank and the call) once
// its Close was called: errors.Is(err, hetsync.ErrClosed).
var ErrClosed = collective.ErrClosed

// Reductions.
const (
	Sum  = collective.Sum
	Avg  = collective.Avg
	Min  = collective.Min
	Max  = collective.Max
	Prod = collective.Prod
)

// F32 views a []float32 as a Buffer (no copy).
func F32(x []float32) Buffer { return collective.F32(x) }

// F64 views a []float64 as a Buffer (no copy).
func F64(x []float64) Buffer { return collective.F64(x) }

// I32 views a []int32 as a Buffer (no copy).
func I32(x []int32) Buffer { return collective.I32(x) }

// I64 views a []int64 as a Buffer (no copy).
func I64(x []int64) Buffer { return collective.I64(x) }
