package trainer

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/compress"
)

// Compressed rounds (Config.Compress): a strategy whose Factory says Compresses sends the
// vector of its rounds' allreduce encoded (bf16, fp16, int8; auto: int8 between hosts only),
// reduced in float32, with this rank's error feedback for that vector, so that what the
// encoding loses one round is sent the next; the counts and votes after the vector travel
// exact (collective.Compressed). Every rank's residual is its own, so a strategy that
// compresses checkpoints per rank (esync always, ssgd when it compresses: ssgdFeedback) and
// each part keeps its rank's residual: a resumed run sends what the uninterrupted one would have.

// intactCollectives are the collectives over which an int8 allreduce leaves every rank the
// same numbers (collective.Compression): the replicas of a run must stay identical. auto runs
// such calls as the ring, or between hosts only as hier-ring (collective's zipSchedule).
var intactCollectives = map[bool][]string{
	false: {"auto", "ring", "ps"},           // int8 on every link
	true:  {"auto", "hier-ring", "hier-ps"}, // int8 between hosts only
}

// checkCompress refuses a Config.Compress the strategy does not use, or one that would let
// the replicas part, naming the fields.
func checkCompress(f Factory, cfg *Config) error {
	z, err := collective.ParseCompression(cfg.Compress)
	if err != nil {
		return fmt.Errorf("trainer: Config.Compress: %w", err)
	}
	if z.Codec == nil || z.Codec.Name() == "none" {
		return nil
	}
	if !f.Compresses {
		return fmt.Errorf("trainer: Config.Compress %s: Config.Strategy %s sends no compressed rounds", cfg.Compress, cfg.Strategy)
	}
	c := *cfg
	if strat, err := f.New(&c); err == nil {
		if u, ok := strat.(uncompressedRounds); ok {
			return fmt.Errorf("trainer: Config.Compress %s: Config.Strategy %s over Config.Collective %s sends no compressed rounds: %s",
				cfg.Compress, cfg.Strategy, cfg.Collective, u.UncompressedRounds())
		}
	}
	intact := intactCollectives[z.BetweenHosts]
	if _, isInt8 := z.Codec.(compress.Int8); isInt8 && !slices.Contains(intact, strings.Split(cfg.Collective, "/")[0]) {
		return fmt.Errorf("trainer: Config.Compress %s: int8 keeps the replicas identical only over %s, not Config.Collective %s",
			cfg.Compress, strings.Join(intact, ", "), cfg.Collective)
	}
	return nil
}

// uncompressedRounds is implemented by a form of a strategy whose Factory says Compresses
// that sends no compressed rounds itself (wbsp-opt over the parameter server): it says why.
type uncompressedRounds interface{ UncompressedRounds() string }

// putRoundExtras writes the first exact values a synchronous round carries after its vector
// (esync's and ssgd's): rank 0's stop vote, then this rank's loss, correct count and samples.
func putRoundExtras(x []float32, stopVote bool, st RoundStats) {
	x[0] = 0
	if stopVote {
		x[0] = 1
	}
	x[1], x[2], x[3] = float32(st.Loss), float32(st.Correct), float32(st.Samples)
}

// compressingCollective is a communicator that can compress an allreduce (collective.Comm).
type compressingCollective interface {
	AllReduceCompressed(ctx context.Context, buf collective.Buffer, op collective.ReduceOp, how collective.Compressed) error
}

// roundReducer allreduces (sums) one strategy's round buffer: a vector followed by extra
// exact elements, the vector compressed as Config.Compress says.
type roundReducer struct {
	how   collective.Compressed // zero: uncompressed
	extra int
}

// roundCompression is cfg.Compress parsed, and whether it encodes the rounds (a codec other
// than none), which gives every rank error feedback of its own.
func roundCompression(cfg *Config) (collective.Compression, bool, error) {
	z, err := collective.ParseCompression(cfg.Compress)
	if err != nil {
		return z, false, fmt.Errorf("trainer: Config.Compress: %w", err)
	}
	return z, z.Codec != nil && z.Codec.Name() != "none", nil
}

// newRoundReducer is the reducer of a buffer of n values followed by extra exact ones.
func newRoundReducer(cfg *Config, n, extra int) (*roundReducer, error) {
	r := &roundReducer{extra: extra}
	z, encodes, err := roundCompression(cfg)
	if err != nil {
		return nil, err
	}
	if encodes {
		r.how = collective.Compressed{Codec: z.Codec, BetweenHosts: z.BetweenHosts, Feedback: compress.NewFeedback(z.Codec, n), Exact: extra}
	}
	return r, nil
}

// allReduce sums buf over the ranks of comm.
func (r *roundReducer) allReduce(ctx context.Context, comm Collective, buf []float32) error {
	if r.how.Codec == nil {
		return comm.AllReduce(ctx, collective.F32(buf), collective.Sum)
	}
	cc, ok := comm.(compressingCollective)
	if !ok {
		return fmt.Errorf("Config.Compress %s: the communicator (%T) cannot compress an allreduce", r.how.Codec.Name(), comm)
	}
	return cc.AllReduceCompressed(ctx, collective.F32(buf), collective.Sum, r.how)
}

// compressingNonBlocking is a communicator that can compress a non-blocking allreduce
// (collective.Comm).
type compressingNonBlocking interface {
	IAllReduceCompressed(ctx context.Context, buf collective.Buffer, op collective.ReduceOp, how collective.Compressed) *collective.Request
}

// iAllReduce starts the sum of buf over the ranks of comm without waiting: buf and the error
// feedback belong to the call until it completes.
func (r *roundReducer) iAllReduce(ctx context.Context, comm nonBlockingComm, buf []float32) (*collective.Request, error) {
	if r.how.Codec == nil {
		return comm.IAllReduce(ctx, collective.F32(buf), collective.Sum), nil
	}
	cc, ok := comm.(compressingNonBlocking)
	if !ok {
		return nil, fmt.Errorf("Config.Compress %s: the communicator (%T) cannot compress a non-blocking allreduce", r.how.Codec.Name(), comm)
	}
	return cc.IAllReduceCompressed(ctx, collective.F32(buf), collective.Sum, r.how), nil
}

// appendState appends to b what a checkpoint keeps of the reducer: nothing without error
// feedback, else the residual's length and values, so that a resumed run sends what the
// uninterrupted one would have.
func (r *roundReducer) appendState(b []byte) []byte {
	if r.how.Feedback == nil {
		return b
	}
	res := r.how.Feedback.Residual()
	return appendFloats(binary.LittleEndian.AppendUint64(b, feedbackMark|uint64(len(res))), res)
}

// splitTrailers cuts what follows a strategy's own state in its checkpoint part into the
// outer optimizer's trailer (appendOuterState's: its length, then that many bytes; present
// when the run has an outer optimizer) and appendState's bytes after it.
func (r *roundReducer) splitTrailers(rest []byte, hasOuter bool) (outer, feedback []byte) {
	if len(rest) < 8 {
		return rest, nil
	}
	l := binary.LittleEndian.Uint64(rest)
	switch {
	case l&feedbackMark != 0:
		return nil, rest
	case hasOuter && l <= uint64(len(rest)-8):
		return rest[:8+l], rest[8+l:]
	}
	return rest, nil
}

// feedbackMark tells the residual's trailer in a checkpoint part from the outer optimizer's,
// whose length never has the top bit set.
const feedbackMark = 1 << 63

// restoreState loads appendState's bytes: none, or a residual of the vector's length.
func (r *roundReducer) restoreState(b []byte) error {
	fb := r.how.Feedback
	switch {
	case len(b) == 0:
		if fb != nil {
			// A checkpoint of a run without compression: nothing was owed yet.
			clear(fb.Residual())
		}
		return nil
	case fb == nil:
		return fmt.Errorf("%d bytes of error feedback, but Config.Compress is none", len(b))
	case len(b) < 8 || binary.LittleEndian.Uint64(b) != feedbackMark|uint64(len(fb.Residual())) || len(b)-8 != 4*len(fb.Residual()):
		return fmt.Errorf("%d bytes of error feedback, want the residual of %d values", len(b), len(fb.Residual()))
	}
	return fb.SetResidual(readFloats(b[8:]))
}
