package bench

import (
	"math"

	"github.com/hetsync/hetsync/collective"
)

// The checked iterations use small integers stored as float32: every partial sum an algorithm
// can form is an integer below 2^11 for p <= 128, so it is exact in float32 and even in fp16,
// and any difference from the expected value is a real error, not rounding.

// sentinel marks elements a collective must overwrite (allgather's foreign blocks, broadcast's
// non-root buffers); it is outside the range of every value a rank contributes.
const sentinel = 77

// period is how often value (period 17 in i) and prodValue (period 2) repeat together.
const period = 34

// value is rank r's contribution at element i: an integer in [-8, 8].
func value(r, i int) float32 { return float32((i*7+r*13)%17 - 8) }

// prodValue is rank r's contribution for a product: 1 or 2, so products stay exact.
func prodValue(r, i int) float32 { return float32(1 + (i+r)%2) }

// a2aValue is what rank src sends to rank dst at element k of its block.
func a2aValue(src, dst, k int) float32 { return float32((src*5+dst*3+k)%17 - 8) }

// expectTable returns the reduced value of element i at index i%period for op over p ranks.
func expectTable(op collective.ReduceOp, p int) []float64 {
	t := make([]float64, period)
	for i := range t {
		var acc float64
		for r := 0; r < p; r++ {
			v := float64(value(r, i))
			if op == collective.Prod {
				v = float64(prodValue(r, i))
			}
			switch {
			case r == 0:
				acc = v
			case op == collective.Sum || op == collective.Avg:
				acc += v
			case op == collective.Min:
				acc = math.Min(acc, v)
			case op == collective.Max:
				acc = math.Max(acc, v)
			case op == collective.Prod:
				acc *= v
			}
		}
		if op == collective.Avg {
			acc /= float64(p)
		}
		t[i] = acc
	}
	return t
}

// fill prepares rank's buffers for one checked call of op.
func fill(op Op, red collective.ReduceOp, rank, p, root int, buf, send []float32) {
	n := len(buf)
	switch op {
	case AllReduce, ReduceScatter:
		for i := range buf {
			if red == collective.Prod {
				buf[i] = prodValue(rank, i)
			} else {
				buf[i] = value(rank, i)
			}
		}
	case AllGather:
		lo, hi := collective.Partition(n, p, rank)
		for i := range buf {
			if i >= lo && i < hi {
				buf[i] = value(rank, i)
			} else {
				buf[i] = sentinel
			}
		}
	case Broadcast:
		for i := range buf {
			if rank == root {
				buf[i] = value(root, i)
			} else {
				buf[i] = sentinel
			}
		}
	case AllToAll:
		for dst := 0; dst < p; dst++ {
			lo, hi := collective.Partition(n, p, dst)
			for k := lo; k < hi; k++ {
				send[k] = a2aValue(rank, dst, k-lo)
			}
		}
		for i := range buf {
			buf[i] = sentinel
		}
	}
}

// countWrong counts the elements of rank's result that differ from the expected ones.
// expect is expectTable(red, p) for the reducing ops.
func countWrong(op Op, red collective.ReduceOp, rank, p, root int, buf []float32, expect []float64, tolerance float64) int64 {
	n := len(buf)
	var wrong int64
	switch op {
	case AllReduce, ReduceScatter:
		lo, hi := 0, n
		if op == ReduceScatter {
			lo, hi = collective.Partition(n, p, rank)
		}
		for i := lo; i < hi; i++ {
			want := expect[i%period]
			got := float64(buf[i])
			if tolerance > 0 {
				// A lossy compression: anything within its bound is right.
				if !(math.Abs(got-want) <= tolerance) {
					wrong++
				}
			} else if red == collective.Avg {
				// The average is the one inexact reduction: allow float32 rounding.
				if math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) || math.IsNaN(got) {
					wrong++
				}
			} else if got != want {
				wrong++
			}
		}
	case AllGather:
		for q := 0; q < p; q++ {
			lo, hi := collective.Partition(n, p, q)
			for i := lo; i < hi; i++ {
				if buf[i] != value(q, i) {
					wrong++
				}
			}
		}
	case Broadcast:
		for i := range buf {
			if buf[i] != value(root, i) {
				wrong++
			}
		}
	case AllToAll:
		for src := 0; src < p; src++ {
			lo, hi := collective.Partition(n, p, src)
			for k := lo; k < hi; k++ {
				if buf[k] != a2aValue(src, rank, k-lo) {
					wrong++
				}
			}
		}
	}
	return wrong
}
