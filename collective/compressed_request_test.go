package collective

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/hetsync/hetsync/compress"
)

// TestIAllReduceCompressedWithinBound runs the non-blocking compressed allreduce of every
// algorithm on 1 to 5 ranks under bf16, fp16 and int8, with error feedback and an exact tail,
// while an uncompressed IAllReduce issued after it is outstanding: the compressed result lies
// within CompressedBound (identical replicas where the blocking form keeps them), the tail is
// exact, the feedback holds what the encodings removed, and the call after it runs
// uncompressed (its integer sums are exact).
func TestIAllReduceCompressedWithinBound(t *testing.T) {
	const n, exact = 1031, 2
	for _, codec := range lossyCodecs {
		for _, alg := range compressedAlgorithms {
			for p := 1; p <= 5; p++ {
				t.Run(fmt.Sprintf("%s/%s/p=%d", codec.Name(), alg, p), func(t *testing.T) {
					t.Parallel()
					j := newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 1024, Links: hostsOf(p)})
					inputs := make([][]float32, p)
					got := make([][]float32, p)
					plain := make([][]float32, p)
					fbs := make([]*compress.Feedback, p)
					for r := range p {
						inputs[r] = compressedInput(r, 5, n)
						copy(inputs[r][n-exact:], []float32{float32(r), 0.25})
						got[r] = append([]float32(nil), inputs[r]...)
						plain[r] = []float32{float32(r), 1 << 20, 3}
						fbs[r] = compress.NewFeedback(codec, n-exact)
					}
					j.mustRun(t, "iallreduce", func(c *Comm) error {
						ctx := context.Background()
						zipped := c.IAllReduceCompressed(ctx, F32(got[c.Rank()]), Sum, Compressed{Feedback: fbs[c.Rank()], Exact: exact})
						after := c.IAllReduce(ctx, F32(plain[c.Rank()]), Sum)
						return WaitAll(ctx, zipped, after)
					})
					head, gotHead := make([][]float32, p), make([][]float32, p)
					for r := range p {
						head[r], gotHead[r] = inputs[r][:n-exact], got[r][:n-exact]
					}
					identical := codec.Name() != "int8" || alg == "ring" || alg == "ps" || alg == "auto"
					checkWithinBound(t, codec, head, gotHead, Sum, identical)
					wantTail := []float32{float32(p * (p - 1) / 2), 0.25 * float32(p)}
					wantPlain := []float32{float32(p * (p - 1) / 2), float32(p << 20), float32(3 * p)}
					for r := range p {
						if tail := got[r][n-exact:]; tail[0] != wantTail[0] || tail[1] != wantTail[1] {
							t.Errorf("rank %d: exact tail %v, want %v", r, tail, wantTail)
						}
						for i, v := range plain[r] {
							if v != wantPlain[i] {
								t.Errorf("rank %d: the uncompressed call after it gave %v, want %v", r, plain[r], wantPlain)
								break
							}
						}
					}
					if p == 1 {
						return
					}
					// Each rank's residual is what its own round trips removed: nonzero
					// somewhere under a lossy codec, and within one rounding per value.
					for r, fb := range fbs {
						nonzero := false
						for i, v := range fb.Residual() {
							nonzero = nonzero || v != 0
							if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
								t.Fatalf("rank %d: residual %d is %v", r, i, v)
							}
						}
						if !nonzero {
							t.Errorf("rank %d: the error feedback kept nothing of its encodings", r)
						}
					}
				})
			}
		}
	}
}

// TestIAllReduceCompressedRefusesBadArguments: the non-blocking form checks its arguments as
// the blocking one does and completes at once with the error.
func TestIAllReduceCompressedRefusesBadArguments(t *testing.T) {
	j := newMemJob(t, 1, Options{Algorithm: "ring"})
	c := j.comms[0]
	buf := make([]float32, 10)
	for _, tc := range []struct {
		how  Compressed
		want string
	}{
		{Compressed{Codec: compress.BF16{}, Feedback: compress.NewFeedback(compress.Int8{}, 10)}, "error feedback encodes with int8"},
		{Compressed{Feedback: compress.NewFeedback(compress.Int8{}, 9)}, "error feedback made for 9 values"},
		{Compressed{Codec: compress.Int8{}, Exact: 11}, "11 exact elements"},
	} {
		done, err := c.IAllReduceCompressed(context.Background(), F32(buf), Sum, tc.how).Test()
		if !done || err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%+v: done %v, error %v; want one containing %q", tc.how, done, err, tc.want)
		}
	}
	done, err := c.IAllReduceCompressed(context.Background(), I32(make([]int32, 4)), Sum, Compressed{Codec: compress.Int8{}}).Test()
	if !done || err == nil || !contains(err.Error(), "needs a float32 sum") {
		t.Errorf("int32 buffer: done %v, error %v", done, err)
	}
}

// TestCompressedFeedbackStepInExactTail: a step of the schedule that lies wholly in the exact
// tail (a ring's segment of a short vector with many exact elements) sends it unencoded and
// leaves the error feedback alone, blocking and non-blocking.
func TestCompressedFeedbackStepInExactTail(t *testing.T) {
	const p, n, exact = 4, 30, 9 // the ring's last segment, [23, 30), is all exact
	for _, blocking := range []bool{true, false} {
		j := newMemJob(t, p, Options{Algorithm: "ring"})
		inputs, got := make([][]float32, p), make([][]float32, p)
		for r := range p {
			inputs[r] = compressedInput(r, 1, n)
			got[r] = append([]float32(nil), inputs[r]...)
		}
		j.mustRun(t, "allreduce", func(c *Comm) error {
			how := Compressed{Feedback: compress.NewFeedback(compress.Int8{}, n-exact), Exact: exact}
			if blocking {
				return c.AllReduceCompressed(context.Background(), F32(got[c.Rank()]), Sum, how)
			}
			return c.IAllReduceCompressed(context.Background(), F32(got[c.Rank()]), Sum, how).Wait(context.Background())
		})
		head, gotHead := make([][]float32, p), make([][]float32, p)
		for r := range p {
			head[r], gotHead[r] = inputs[r][:n-exact], got[r][:n-exact]
		}
		checkWithinBound(t, compress.Int8{}, head, gotHead, Sum, true)
	}
}
