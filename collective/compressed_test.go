package collective

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/compress"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// compressedAlgorithms are the allreduce algorithms the compressed tests run: every built-in
// one, auto (recursive doubling for small calls), and the host-aware hierarchy.
var compressedAlgorithms = []string{"ring", "butterfly", "binary-blocks", "ps", "auto", "hier-ring/grouped", "hier-butterfly/interleaved"}

// lossyCodecs are the codecs a compressed allreduce is tested with.
var lossyCodecs = []compress.Codec{compress.BF16{}, compress.FP16{}, compress.Int8{}}

// compressedInput is rank r's vector of round t: values in [-1, 1] scaled by a magnitude that
// changes every 300 elements (from 1e-3 to 1e3), so that int8's blocks meet both small and
// large values and a block straddles two magnitudes.
func compressedInput(r, t, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(t)))
	x := make([]float32, n)
	for i := range x {
		mag := math.Pow(10, float64((i/300)%7-3))
		x[i] = float32((rng.Float64()*2 - 1) * mag)
	}
	return x
}

// exactSum is the sum of the ranks' inputs in float64, and the sum of their magnitudes.
func exactSum(inputs [][]float32) (sum []float64, absSum []float32) {
	n := len(inputs[0])
	sum, absSum = make([]float64, n), make([]float32, n)
	abs := make([]float64, n)
	for _, x := range inputs {
		for i, v := range x {
			sum[i] += float64(v)
			abs[i] += math.Abs(float64(v))
		}
	}
	for i, v := range abs {
		absSum[i] = float32(v)
	}
	return sum, absSum
}

// hostsOf puts the ranks of a p-rank job two to a host (ranks 2h and 2h+1 on host h).
func hostsOf(p int) *topology.Matrix {
	host := make([]int, p)
	for r := range host {
		host[r] = r / 2
	}
	return rackMatrix(host, twoRacks(host), nil)
}

// TestCompressedAllReduceWithinBound runs a compressed allreduce of every algorithm on 1 to 9
// ranks under bf16, fp16 and int8, over lengths that leave the segments and int8's blocks
// uneven, and checks every rank's result against the exact sum within CompressedBound. Under
// fp16 and bf16 every algorithm, under int8 ring and ps, must also leave bitwise identical
// replicas.
func TestCompressedAllReduceWithinBound(t *testing.T) {
	for _, codec := range lossyCodecs {
		for _, alg := range compressedAlgorithms {
			for p := 1; p <= 9; p++ {
				t.Run(fmt.Sprintf("%s/%s/p=%d", codec.Name(), alg, p), func(t *testing.T) {
					t.Parallel()
					opts := Options{Algorithm: alg, SegmentBytes: 1024, Links: hostsOf(p),
						Compression: Compression{Codec: codec}}
					j := newMemJob(t, p, opts)
					identical := codec.Name() != "int8" || alg == "ring" || alg == "ps" || alg == "auto"
					for _, n := range []int{0, 1, p + 2, 1031} {
						checkCompressed(t, j, codec, n, Sum, identical)
					}
					checkCompressed(t, j, codec, 611, Avg, identical)
				})
			}
		}
	}
}

// TestCompressedAllReduceLargeMessages runs compressed allreduces whose messages are above
// the inline executor's limit, so that sends (encoding) and receives (decoding) run on two
// goroutines at once.
func TestCompressedAllReduceLargeMessages(t *testing.T) {
	for _, alg := range []string{"ring", "butterfly"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			opts := Options{Algorithm: alg, SegmentBytes: 2 << 20, Compression: Compression{Codec: compress.Int8{}}}
			checkCompressed(t, newMemJob(t, 3, opts), compress.Int8{}, 3<<19+7, Sum, alg == "ring")
		})
	}
}

// TestCompressedAllReduceTCP runs compressed allreduces over stream endpoints on loopback
// TCP, whose receivers lend their buffers (transport.Borrower): an encoded message is still
// received whole and decoded, never reduced as float32.
func TestCompressedAllReduceTCP(t *testing.T) {
	for _, alg := range []string{"ring", "butterfly", "ps"} {
		t.Run(alg, func(t *testing.T) {
			j := newJob(t, tcpEndpoints(t, 3), Options{Algorithm: alg, SegmentBytes: 4096, Compression: Compression{Codec: compress.Int8{}}})
			for _, n := range []int{1, 1031, 5000} {
				checkCompressed(t, j, compress.Int8{}, n, Sum, alg != "butterfly")
			}
		})
	}
}

// checkCompressed runs one allreduce of n elements on j and checks it.
func checkCompressed(t *testing.T, j *job, codec compress.Codec, n int, op ReduceOp, identical bool) {
	t.Helper()
	p := len(j.comms)
	inputs := make([][]float32, p)
	got := make([][]float32, p)
	for r := range p {
		inputs[r] = compressedInput(r, n, n)
		got[r] = append([]float32(nil), inputs[r]...)
	}
	j.mustRun(t, fmt.Sprintf("allreduce of %d", n), func(c *Comm) error {
		return c.AllReduce(context.Background(), F32(got[c.Rank()]), op)
	})
	checkWithinBound(t, codec, inputs, got, op, identical)
}

// checkWithinBound checks every rank's result against the exact reduction of inputs.
func checkWithinBound(t *testing.T, codec compress.Codec, inputs, got [][]float32, op ReduceOp, identical bool) {
	t.Helper()
	p, n := len(inputs), len(inputs[0])
	sum, absSum := exactSum(inputs)
	bound := make([]float32, n)
	if err := CompressedBound(codec, p, bound, absSum); err != nil {
		t.Fatal(err)
	}
	scale := 1.0
	if op == Avg {
		scale = 1 / float64(p)
	}
	for r := range p {
		for i, v := range got[r] {
			want := sum[i] * scale
			if d := math.Abs(float64(v) - want); !(d <= float64(bound[i])*scale) {
				t.Fatalf("n=%d rank %d element %d: got %g, exact %g: off by %g, bound %g", n, r, i, v, want, d, float64(bound[i])*scale)
			}
		}
		if identical && r > 0 {
			for i := range got[r] {
				if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) {
					t.Fatalf("n=%d element %d: rank %d has %g, rank 0 %g: replicas differ", n, i, r, got[r][i], got[0][i])
				}
			}
		}
	}
}

// TestCompressedAllReduceSendsFewerBytes: a rank's BytesSent under bf16 is half, under int8
// about a quarter of what it sends uncompressed.
func TestCompressedAllReduceSendsFewerBytes(t *testing.T) {
	const p, n = 4, 1 << 14
	sent := map[string]int64{}
	for _, name := range []string{"none", "bf16", "int8"} {
		z, err := ParseCompression(name)
		if err != nil {
			t.Fatal(err)
		}
		j := newMemJob(t, p, Options{Algorithm: "ring", Compression: z})
		j.mustRun(t, name, func(c *Comm) error {
			return c.AllReduce(context.Background(), F32(compressedInput(c.Rank(), 0, n)), Sum)
		})
		sent[name] = j.comms[1].BytesSent()
	}
	if want := int64(2 * (p - 1) * 4 * n / p); sent["none"] != want {
		t.Errorf("uncompressed ring sent %d bytes, want %d", sent["none"], want)
	}
	if 2*sent["bf16"] != sent["none"] {
		t.Errorf("bf16 sent %d bytes, uncompressed %d: want half", sent["bf16"], sent["none"])
	}
	if q := float64(sent["int8"]) / float64(sent["none"]); q < 0.25 || q > 0.27 {
		t.Errorf("int8 sent %d bytes, uncompressed %d: ratio %.3f, want about 0.254", sent["int8"], sent["none"], q)
	}
}

// TestCompressedExactTail: the elements Compressed.Exact names (a round's counts and votes)
// arrive as exact sums under every algorithm, beside a vector compressed within its bound.
func TestCompressedExactTail(t *testing.T) {
	const n, exact = 1000, 3
	codec := compress.Int8{}
	for _, alg := range compressedAlgorithms {
		for _, p := range []int{2, 3, 5, 8} {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				t.Parallel()
				j := newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 1024, Links: hostsOf(p)})
				inputs := make([][]float32, p)
				got := make([][]float32, p)
				for r := range p {
					inputs[r] = compressedInput(r, 3, n)
					// A stop vote, a sample count and a loss beside values up to 1e3.
					copy(inputs[r][n-exact:], []float32{float32(r % 2), 64, 0.1 * float32(r+1)})
					got[r] = append([]float32(nil), inputs[r]...)
				}
				j.mustRun(t, "allreduce", func(c *Comm) error {
					return c.AllReduceCompressed(context.Background(), F32(got[c.Rank()]), Sum,
						Compressed{Codec: codec, Feedback: compress.NewFeedback(codec, n-exact), Exact: exact})
				})
				head := make([][]float32, p)
				gotHead := make([][]float32, p)
				for r := range p {
					head[r], gotHead[r] = inputs[r][:n-exact], got[r][:n-exact]
				}
				checkWithinBound(t, codec, head, gotHead, Sum, alg == "ring" || alg == "ps")
				for r := range p {
					var vote, loss float32
					for q := range p {
						vote += float32(q % 2)
						loss += 0.1 * float32(q+1)
					}
					tail := got[r][n-exact:]
					if tail[0] != vote || tail[1] != float32(64*p) || math.Abs(float64(tail[2]-loss)) > 1e-6 {
						t.Errorf("rank %d: exact elements %v, want [%g %d %g]", r, tail, vote, 64*p, loss)
					}
				}
			})
		}
	}
}

// TestCompressedFeedbackKeepsTheSum runs a long fixed sequence of int8 allreduces whose
// inputs hold, next to one large value per block, small ones below the codec's resolution.
// With error feedback the sum of the results follows the sum of the exact sums within one
// call's bound however long the sequence; without it the small values are never sent and the
// sums part by far more.
func TestCompressedFeedbackKeepsTheSum(t *testing.T) {
	const p, n, rounds = 4, 700, 300
	codec := compress.Int8{}
	input := func(r, t int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(1e-4 * float64((i*7+r*3+t)%11+1))
			if i%compress.Int8Block == 0 {
				x[i] = 1
			}
		}
		return x
	}
	for _, alg := range []string{"ring", "ps", "auto", "hier-ring/grouped"} {
		t.Run(alg, func(t *testing.T) {
			drift := func(feedback bool) (worst, bound float64) {
				j := newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 1024, Links: hostsOf(p)})
				fbs := make([]*compress.Feedback, p)
				for r := range fbs {
					fbs[r] = compress.NewFeedback(codec, n)
				}
				sumGot, sumExact := make([]float64, n), make([]float64, n)
				one := make([]float32, n)
				got := make([][]float32, p)
				for round := range rounds {
					inputs := make([][]float32, p)
					for r := range p {
						inputs[r] = input(r, round)
						got[r] = append(got[r][:0], inputs[r]...)
					}
					j.mustRun(t, "allreduce", func(c *Comm) error {
						how := Compressed{Codec: codec}
						if feedback {
							how.Feedback = fbs[c.Rank()]
						}
						return c.AllReduceCompressed(context.Background(), F32(got[c.Rank()]), Sum, how)
					})
					exact, absSum := exactSum(inputs)
					if err := CompressedBound(codec, p, one, absSum); err != nil {
						t.Fatal(err)
					}
					for i := range sumGot {
						sumGot[i] += float64(got[0][i])
						sumExact[i] += exact[i]
						bound = max(bound, float64(one[i]))
					}
				}
				for i := range sumGot {
					worst = max(worst, math.Abs(sumGot[i]-sumExact[i]))
				}
				return worst, bound
			}
			with, bound := drift(true)
			if with > bound {
				t.Errorf("with error feedback the sums of %d results part by %g, more than one call's bound %g", rounds, with, bound)
			}
			if without, _ := drift(false); without <= 2*bound {
				t.Errorf("without error feedback the sums part by %g only (bound %g): the sequence does not test the feedback", without, bound)
			}
		})
	}
}

// TestCompressionBetweenHostsOnly: under "auto" a rank encodes what it sends to another host
// and nothing it sends inside its own: the bytes between two ranks of one host are those of an
// uncompressed run, those between hosts about a quarter.
func TestCompressionBetweenHostsOnly(t *testing.T) {
	const p, n = 4, 4096
	links := hostsOf(p) // two hosts of two ranks
	for _, alg := range []string{"hier-ring/grouped", "ring", "auto"} {
		t.Run(alg, func(t *testing.T) {
			sent := func(name string) [][]int {
				z, err := ParseCompression(name)
				if err != nil {
					t.Fatal(err)
				}
				rec := make([]*countingEndpoint, p)
				eps := transport.NewMemJob(p)
				for r := range eps {
					rec[r] = &countingEndpoint{Endpoint: eps[r], bytes: make([]int, p)}
					eps[r] = rec[r]
				}
				j := newJob(t, eps, Options{Algorithm: alg, Links: links, Compression: z})
				inputs := make([][]float32, p)
				got := make([][]float32, p)
				for r := range p {
					inputs[r] = compressedInput(r, 1, n)
					got[r] = append([]float32(nil), inputs[r]...)
				}
				j.mustRun(t, "allreduce", func(c *Comm) error { return c.AllReduce(context.Background(), F32(got[c.Rank()]), Sum) })
				// Flat ring forwards final values over both kinds of link: only the
				// hierarchy, whose outer stage rounds them before the hosts share them
				// (auto runs it for such calls), keeps int8 replicas identical when only
				// some links encode.
				checkWithinBound(t, compress.Int8{}, inputs, got, Sum, alg != "ring")
				out := make([][]int, p)
				for r := range out {
					out[r] = rec[r].bytes
				}
				return out
			}
			auto, none := sent("auto"), sent("none")
			for r := range p {
				for q := range p {
					a, b := auto[r][q], none[r][q]
					if links.Host[r] == links.Host[q] && a != b {
						t.Errorf("rank %d sent %d bytes to rank %d on its host, %d uncompressed", r, a, q, b)
					}
					if links.Host[r] != links.Host[q] && (a > b*27/100 || (b > 0) != (a > 0)) {
						t.Errorf("rank %d sent %d bytes to rank %d on another host, %d uncompressed", r, a, q, b)
					}
				}
			}
		})
	}
}

// countingEndpoint counts the payload bytes sent to each peer.
type countingEndpoint struct {
	transport.Endpoint
	bytes []int
}

func (e *countingEndpoint) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	e.bytes[to] += len(payload)
	return e.Endpoint.Send(ctx, to, h, payload)
}

// TestCompressionMismatchFails: ranks that disagree on the codec fail as different
// collectives, and the arguments a compressed allreduce cannot take are refused by name.
func TestCompressionMismatchFails(t *testing.T) {
	j := newMemJob(t, 2, Options{Algorithm: "ring"})
	errs := j.run(func(c *Comm) error {
		var codec compress.Codec = compress.BF16{}
		if c.Rank() == 1 {
			codec = compress.Int8{}
		}
		return c.AllReduceCompressed(context.Background(), F32(make([]float32, 64)), Sum, Compressed{Codec: codec})
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: a bf16 and an int8 allreduce ran together", r)
		}
	}
	c := newMemJob(t, 1, Options{}).comms[0]
	for _, tc := range []struct {
		buf  Buffer
		op   ReduceOp
		how  Compressed
		want string
	}{
		{I32(make([]int32, 4)), Sum, Compressed{Codec: compress.Int8{}}, "needs a float32 sum"},
		{F32(make([]float32, 4)), Max, Compressed{Codec: compress.Int8{}}, "needs a float32 sum"},
		{F32(make([]float32, 4)), Sum, Compressed{Codec: compress.FP16{}, Feedback: compress.NewFeedback(compress.Int8{}, 4)}, "feedback encodes with int8"},
		{F32(make([]float32, 4)), Sum, Compressed{Feedback: compress.NewFeedback(compress.Int8{}, 5)}, "made for 5 values"},
		{F32(make([]float32, 4)), Sum, Compressed{Codec: compress.Int8{}, Exact: 5}, "5 exact elements in a buffer of 4"},
	} {
		err := c.AllReduceCompressed(context.Background(), tc.buf, tc.op, tc.how)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.how, err, tc.want)
		}
	}
	if _, err := New(transport.NewMemJob(1)[0], Options{Codec: transport.CodecFP16, Compression: Compression{Codec: compress.Int8{}}}); err == nil {
		t.Error("New took a lossy wire codec and a compression at once")
	}
	if _, err := ParseCompression("int4"); err == nil || !strings.Contains(err.Error(), "int8") {
		t.Errorf("ParseCompression(int4): %v, want an error listing the known ones", err)
	}
}

// TestCompressedCallsDoNotReplan: auto's plan prices float32 calls, so a compressed call,
// however far off that price, never makes the ranks measure the links again.
func TestCompressedCallsDoNotReplan(t *testing.T) {
	const p, n = 4, 1 << 12
	j := newMemJob(t, p, Options{Algorithm: "auto", Links: hostsOf(p), Replan: ReplanOptions{Calls: 1, Every: 1},
		Compression: Compression{Codec: compress.Int8{}}})
	for range 6 {
		j.mustRun(t, "allreduce", func(c *Comm) error {
			return c.AllReduce(context.Background(), F32(compressedInput(c.Rank(), 0, n)), Sum)
		})
	}
	for r, c := range j.comms {
		if rp := c.Replans(); len(rp) != 0 {
			t.Errorf("rank %d re-planned after compressed calls: %+v", r, rp)
		}
	}
}

// TestCompressedCallsOfBothKinds: a Comm whose allreduces encode between hosts only, which also
// makes calls that encode every link, runs each kind under auto with its own schedule (the
// hierarchy for the first, the ring for the second), identical replicas for both.
func TestCompressedCallsOfBothKinds(t *testing.T) {
	const p, n = 3, 3000 // hosts of 2 and 1 ranks
	z, err := ParseCompression("auto")
	if err != nil {
		t.Fatal(err)
	}
	j := newMemJob(t, p, Options{Algorithm: "auto", Links: hostsOf(p), Compression: z})
	for _, every := range []bool{false, true, false} {
		inputs := make([][]float32, p)
		got := make([][]float32, p)
		for r := range p {
			inputs[r] = compressedInput(r, 2, n)
			got[r] = append([]float32(nil), inputs[r]...)
		}
		j.mustRun(t, "allreduce", func(c *Comm) error {
			if every {
				return c.AllReduceCompressed(context.Background(), F32(got[c.Rank()]), Sum, Compressed{Codec: compress.Int8{}})
			}
			return c.AllReduce(context.Background(), F32(got[c.Rank()]), Sum)
		})
		checkWithinBound(t, compress.Int8{}, inputs, got, Sum, true)
	}
}
