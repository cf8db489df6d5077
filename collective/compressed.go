package collective

import (
	"context"
	"errors"
	"fmt"

	"github.com/hetsync/hetsync/compress"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// Compressed allreduce: a float32 sum (or average) whose messages travel encoded by a lossy
// codec of package compress (bf16, fp16, int8 with a scale per block), while every reduction
// stays in float32: a receiver decodes and adds. The encoding happens where the executor sends
// a step and the decoding where it receives one, so every algorithm (ring, butterfly,
// binary-blocks, ps, recursive doubling, the hierarchical hier-NAME, a registered one) runs
// compressed without a schedule of its own.
//
// A sender replaces the values it sent with what its receiver decodes (the round trip), so
// that both ends hold the same numbers: the two partners of a recursive-doubling step add the
// same operands, and an owner keeps the final values its peers receive. Under fp16 and bf16 a
// round trip gives values that went through one back unchanged, and every rank rounds its
// result once more at the end (zipEnd): every algorithm leaves bitwise identical replicas.
// Under int8 the round trip gives them back only over the same range (the scale of a block
// decodes to itself), so ring and ps leave identical replicas, and auto runs int8 calls as the
// ring (zipSchedule), while butterfly, binary-blocks, recursive doubling and the hier-
// configurations, which forward final values in ranges of other bounds than they received
// them in, may leave replicas that differ, each within the bound. With BetweenHosts only the
// messages between hosts round: hier-ring and hier-ps, whose outer stage rounds the final
// values before each host shares them exactly, keep the replicas identical (auto runs such
// calls as hier-ring); a flat ring or ps, which hand final values on over both kinds of link,
// do not. A compressed call is not judged against auto's plan, which prices float32 calls: it
// never makes the ranks measure the links again.
//
// Bound: an element goes through at most 2p roundings on its way from the inputs to a rank's
// result (p-1 partial sums and 1 final value for ring, two operands per level for recursive
// doubling), each of a partial sum no larger than the sum of the inputs' magnitudes, so
// |result − exact sum| ≤ 2p · ErrorBound(Σ|x_i|) (CompressedBound), with int8's blocks taken
// around the element (a message's blocks start where the message starts).
//
// Error feedback (Compressed.Feedback) keeps what a rank's own round trips removed from its
// buffer and adds it to the next call's input. When each rounding that reaches the result is
// made by one rank, as in ring and ps (and hier-ring between hosts), the residuals of all ranks sum
// to what the call's result misses of the exact sum: over many calls the sum of the results
// then follows the sum of the exact sums within one call's bound, where without feedback a
// value below the codec's resolution is never sent.

// Compression is how a Comm's allreduces travel (Options.Compression).
type Compression struct {
	// Codec encodes the float32 values an allreduce sends; nil or compress.None sends them as
	// they are.
	Codec compress.Codec
	// BetweenHosts compresses only messages between ranks on different hosts of
	// Options.Links (the thin links), never those inside a host; without a link matrix it
	// compresses nothing.
	BetweenHosts bool
}

// CompressionNames are the names ParseCompression knows.
func CompressionNames() []string { return append(compress.Names(), autoName) }

// ParseCompression reads a compression as flags spell it: a codec name (none, bf16, fp16,
// int8) compresses every message of a float32 sum or average; "auto" sends int8 across the
// thin links only, between the hosts of the job's link matrix, and float32 inside a host,
// where a link is fast enough that encoding would cost more than it saves.
func ParseCompression(name string) (Compression, error) {
	if name == autoName {
		return Compression{Codec: compress.Int8{}, BetweenHosts: true}, nil
	}
	c, err := compress.Lookup(name)
	if err != nil {
		return Compression{}, fmt.Errorf("compression %q: unknown (known: %v)", name, CompressionNames())
	}
	return Compression{Codec: c}, nil
}

// String is the compression as ParseCompression reads it.
func (z Compression) String() string {
	switch {
	case !z.lossy():
		return "none"
	case z.BetweenHosts:
		return z.Codec.Name() + " between hosts"
	}
	return z.Codec.Name()
}

func (z Compression) lossy() bool {
	if z.Codec == nil {
		return false
	}
	_, none := z.Codec.(compress.None)
	return !none
}

// check refuses a compression that cannot be combined with the Comm's other options.
func (z Compression) check(o Options) error {
	if z.lossy() && o.Codec.Lossy() {
		return fmt.Errorf("collective: Compression %s and the lossy wire codec %v: choose one", z, o.Codec)
	}
	return nil
}

// Compressed is one allreduce's compression (AllReduceCompressed).
type Compressed struct {
	// Codec encodes what the call sends; nil means Feedback's codec, or with no Feedback the
	// Comm's Options.Compression.
	Codec compress.Codec
	// BetweenHosts encodes only messages between hosts (Compression.BetweenHosts).
	BetweenHosts bool
	// Feedback, when not nil, is this rank's error feedback for the buffer: made with
	// compress.NewFeedback for the buffer's length, kept from call to call (its residual is
	// what a checkpoint saves). Each rank owns its own.
	Feedback *compress.Feedback
	// Exact is how many elements at the end of the buffer travel as float32, unrounded: the
	// counts and votes a training round carries beside its vector. A Feedback then covers the
	// buffer without them.
	Exact int
}

// AllReduceCompressed is AllReduce of a float32 sum or average whose messages travel encoded
// as how says (see Compression for the bound and the replicas). Every rank must pass the same
// codec; they differ only in their own Feedback.
func (c *Comm) AllReduceCompressed(ctx context.Context, buf Buffer, op ReduceOp, how Compressed) error {
	z, err := c.compressedArgs(buf, op, how)
	if err != nil {
		return err
	}
	seq, queued := c.turns.issue(nil)
	if queued != nil {
		if err := c.awaitTurn(ctx, kindAllReduce, queued); err != nil {
			return err
		}
	}
	err = c.execCompressed(ctx, seq, buf, op, z, how)
	c.passTurn()
	return err
}

// IAllReduceCompressed is the non-blocking AllReduceCompressed: the same codecs, error
// feedback, exact tail and bound, for every algorithm. The call reads and writes buf and
// how.Feedback's residual until it completes: touch neither before Wait returns or Test
// reports it done.
func (c *Comm) IAllReduceCompressed(ctx context.Context, buf Buffer, op ReduceOp, how Compressed) *Request {
	z, err := c.compressedArgs(buf, op, how)
	return c.startCall(err, kindAllReduce, func(seq uint64) error {
		return c.execCompressed(ctx, seq, buf, op, z, how)
	})
}

// compressedArgs checks a compressed allreduce's arguments and returns the compression it
// runs with: how's codec (Feedback's when how names none), else the Comm's own.
func (c *Comm) compressedArgs(buf Buffer, op ReduceOp, how Compressed) (Compression, error) {
	if err := c.checkArgs(kindAllReduce, buf, op, 0); err != nil {
		return Compression{}, err
	}
	z := Compression{Codec: how.Codec, BetweenHosts: how.BetweenHosts}
	if fb := how.Feedback; fb != nil {
		switch {
		case z.Codec == nil:
			z.Codec = fb.Codec()
		case z.Codec.Name() != fb.Codec().Name():
			return z, c.argErr(kindAllReduce, "codec %s, but the error feedback encodes with %s", z.Codec.Name(), fb.Codec().Name())
		}
		if len(fb.Residual()) != buf.Len()-how.Exact {
			return z, c.argErr(kindAllReduce, "error feedback made for %d values, buffer of %d with %d exact", len(fb.Residual()), buf.Len(), how.Exact)
		}
	}
	if how.Exact < 0 || how.Exact > buf.Len() {
		return z, c.argErr(kindAllReduce, "%d exact elements in a buffer of %d", how.Exact, buf.Len())
	}
	if z.Codec == nil {
		z = c.opts.Compression
	}
	if z.lossy() && (buf.DType != Float32 || (op != Sum && op != Avg)) {
		return z, c.argErr(kindAllReduce, "compression %s needs a float32 sum or average, not %v %v", z, buf.DType, op)
	}
	if err := z.check(c.opts); err != nil {
		return z, c.argErr(kindAllReduce, "%v", err)
	}
	return z, nil
}

// execCompressed runs compressed allreduce seq under z; the caller has the turn.
func (c *Comm) execCompressed(ctx context.Context, seq uint64, buf Buffer, op ReduceOp, z Compression, how Compressed) error {
	c.zip.set(z, how.Feedback, how.Exact)
	err := c.exec(ctx, seq, kindAllReduce, buf, Buffer{}, op, 0)
	c.zip.set(Compression{}, nil, 0)
	return err
}

// zipSchedule is the schedule of a compressed allreduce of n float32 values whose own
// schedule is s: s, except that auto runs an int8 call as the ring (in the grouped order of
// the link matrix, when there is one), whose every final value travels over the same range at
// every hop, so that its round trip gives it back unchanged and the ranks end identical, where
// auto's other choices (recursive doubling, butterfly, binary blocks) forward final values in
// ranges of other bounds. Encoding between hosts only, it runs hier-ring/grouped: the ring
// across hosts rounds the final values, which each host then shares exactly.
func (c *Comm) zipSchedule(s *schedule, n int) *schedule {
	if _, isAuto := c.alg.(*auto); !isAuto || !c.running().roundsByRange() {
		return s
	}
	between := c.running().BetweenHosts
	r := &c.zip.rings[btoi(between)]
	if r.alg == nil {
		o := c.opts
		o.Algorithm = "ring"
		if between {
			o.Algorithm = "hier-ring/grouped"
		}
		alg, err := lookupAlgorithm(o.Algorithm, o)
		if err != nil {
			// The built-in ring builds for every job; a registry without it keeps auto's.
			return s
		}
		r.alg, r.cache = alg, map[int]*schedule{}
	}
	if rs, ok := r.cache[n]; ok {
		c.growTemp(rs, 4)
		return rs
	}
	if len(r.cache) >= maxCachedSchedules {
		clear(r.cache)
	}
	rs := c.build(r.alg, kindAllReduce, n, 0, Float32)
	r.cache[n] = rs
	return rs
}

// roundsByRange says whether the compression's round trip gives values that went through one
// back unchanged only over the same range (int8's scale per block from the message's start),
// not whatever the range (fp16, bf16).
func (z Compression) roundsByRange() bool {
	switch z.Codec.(type) {
	case compress.FP16, compress.BF16:
		return false
	}
	return true
}

// zipState is the compression of the call that has the turn, and its pooled wire buffers.
type zipState struct {
	// call is set by AllReduceCompressed for its call; zero otherwise (Options.Compression).
	call     Compression
	feedback *compress.Feedback
	exact    int // Compressed.Exact of the call
	// codec is the running call's codec, nil when it runs uncompressed; thin[peer] says
	// whether messages to and from peer are encoded (every peer unless BetweenHosts).
	codec    compress.Codec
	thinOnly bool
	links    *topology.Matrix
	rank     int
	residual []float32
	// head is where the running call's exact elements begin: [0, head) is encoded.
	head int
	// sendWire and recvWire hold one encoded message each; scratch one decoded message (for
	// feedback). The sender and the receiver of the executor run on different goroutines.
	sendWire, recvWire []byte
	scratch            []float32
	// rings are what auto runs int8 calls with (zipSchedule), built on first use, and their
	// schedules by length: the ring, and for BetweenHosts hier-ring/grouped.
	rings [2]struct {
		alg   algorithm
		cache map[int]*schedule
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (z *zipState) set(c Compression, fb *compress.Feedback, exact int) {
	z.call, z.feedback, z.exact = c, fb, exact
}

// running is the compression the running call asks for: its own, else the Comm's.
func (c *Comm) running() Compression {
	if c.zip.call.Codec != nil {
		return c.zip.call
	}
	return c.opts.Compression
}

// zipWanted says whether the call of kind over buf runs compressed: only a float32 allreduce
// summing or averaging over several ranks, and under BetweenHosts only on a job of several
// hosts. Such a call never runs through the host's arena, which has no wire to compress.
func (c *Comm) zipWanted(kind collKind, buf Buffer, op ReduceOp) bool {
	how := c.running()
	if kind != kindAllReduce || !how.lossy() || buf.DType != Float32 || (op != Sum && op != Avg) || c.Size() < 2 {
		return false
	}
	return !how.BetweenHosts || (c.opts.Links != nil && c.opts.Links.Hosts() > 1)
}

// zipEnd ends a compressed call that succeeded: under a codec whose round trip gives values
// that went through it back unchanged whatever the range (fp16, bf16), every rank rounds its
// result once more, which changes only the values a rank computed itself and did not send
// (the two partners of recursive doubling's last step, of which only one forwards the sum to
// a folded rank), so that every rank ends with the same numbers under every algorithm.
func (c *Comm) zipEnd(buf Buffer) {
	z := &c.zip
	if c.running().roundsByRange() {
		return
	}
	x := view[float32](buf.Bytes)[:z.head]
	for len(x) > 0 {
		k := min(len(x), len(z.sendWire)/z.codec.EncodedLen(1))
		wire := z.sendWire[:z.codec.EncodedLen(k)]
		z.codec.Encode(wire, x[:k])
		_ = z.codec.Decode(x[:k], wire)
		x = x[k:]
	}
}

// zipBegin sets up the running call's compression for schedule s: it returns whether the
// call is compressed, and adds the feedback's residual, if any, to the input.
func (c *Comm) zipBegin(kind collKind, buf Buffer, op ReduceOp, s *schedule) bool {
	z := &c.zip
	z.codec, z.residual = nil, nil
	if !c.zipWanted(kind, buf, op) {
		return false
	}
	how := c.running()
	z.codec, z.thinOnly, z.links, z.rank = how.Codec, how.BetweenHosts, c.opts.Links, c.Rank()
	z.head = buf.Len() - z.exact
	if z.feedback != nil {
		z.residual = z.feedback.Residual()
		x := view[float32](buf.Bytes)
		for i, r := range z.residual {
			x[i] += r
		}
		clear(z.residual)
	}
	// At least a few KiB: zipEnd rounds the whole buffer through the send buffer.
	need := z.codec.EncodedLen(max(s.maxMsg, 4096)) + 4*z.exact
	if len(z.sendWire) < need {
		z.sendWire, z.recvWire = make([]byte, need), make([]byte, need)
	}
	if z.residual != nil && len(z.scratch) < s.maxMsg {
		z.scratch = make([]float32, s.maxMsg)
	}
	return true
}

// signed is the op signature of a compressed call: ranks that encode differently must fail
// as different collectives, not decode each other's bytes.
func (z *zipState) signed(op uint32) uint32 {
	h := sigHash(op)
	name := z.codec.Name()
	for i := 0; i < len(name); i++ {
		h = h.mix(name[i])
	}
	if z.thinOnly {
		h = h.mix('t')
	}
	for i := 0; i < 64; i += 8 {
		h = h.mix(byte(uint64(z.exact) >> i))
	}
	if uint32(h) == abortOp {
		h++
	}
	return uint32(h)
}

// encodes says whether the running call's messages to or from peer travel encoded.
func (z *zipState) encodes(peer int) bool {
	if z.codec == nil {
		return false
	}
	return !z.thinOnly || z.links.Host[peer] != z.links.Host[z.rank]
}

// split cuts the step's range of buf at the running call's exact elements: x is encoded,
// tail travels as it is, and wire holds both, in that order.
func (z *zipState) split(st *step, buf Buffer, wire []byte) (x, tail []float32, enc, raw []byte) {
	all := view[float32](buf.Bytes)[st.lo:st.hi]
	h := min(max(z.head-st.lo, 0), len(all))
	x, tail = all[:h], all[h:]
	n := z.codec.EncodedLen(len(x))
	return x, tail, wire[:n], wire[n : n+4*len(tail)]
}

// encodeSend encodes the step's range of buf into the send wire buffer and leaves in buf what
// the receiver will decode, keeping the difference as the feedback's residual.
func (z *zipState) encodeSend(st *step, buf Buffer) []byte {
	x, tail, wire, raw := z.split(st, buf, z.sendWire)
	copy(raw, asBytes(tail))
	z.codec.Encode(wire, x)
	if z.residual == nil {
		// The wire was made from x just now: it always has the length Decode wants.
		_ = z.codec.Decode(x, wire)
	} else {
		d := z.scratch[:len(x)]
		_ = z.codec.Decode(d, wire)
		// A step that lies wholly in the exact tail encodes nothing and starts past the
		// residual's end.
		lo := min(st.lo, len(z.residual))
		r := z.residual[lo : lo+len(x)]
		for i, v := range d {
			r[i] += x[i] - v
			x[i] = v
		}
	}
	return z.sendWire[:len(wire)+len(raw)]
}

// receiveEncoded receives one encoded message and decodes it into the step's range of buf,
// adding for a reducing step.
func (c *Comm) receiveEncoded(ctx context.Context, st *step, buf Buffer, h transport.Header) error {
	z := &c.zip
	x, tail, wire, raw := z.split(st, buf, z.recvWire)
	err := c.recvExact(ctx, st.peer, h, z.recvWire[:len(wire)+len(raw)])
	if err == nil {
		if st.kind == stepRecvReduce {
			err = z.codec.DecodeAdd(x, wire)
			reduceBytes(Float32, Sum, asBytes(tail), raw)
		} else {
			err = z.codec.Decode(x, wire)
			copy(asBytes(tail), raw)
		}
	}
	if err != nil {
		return fmt.Errorf("receiving [%d,%d) from rank %d (%s): %w", st.lo, st.hi, st.peer, z.codec.Name(), err)
	}
	return nil
}

// CompressedBound writes into bound the largest difference CompressedBound promises between
// a compressed allreduce's sum over p ranks and the exact sum, for inputs whose magnitudes sum
// to absSum (Σ_i |x_i| element by element): 2p times the codec's ErrorBound of absSum, each
// element's taken as the largest of absSum within one int8 block of it, plus float32's own
// rounding of a sum of p terms.
func CompressedBound(codec compress.Codec, p int, bound, absSum []float32) error {
	if len(bound) != len(absSum) {
		return errors.New("collective: CompressedBound: bound and absSum differ in length")
	}
	// A message's int8 blocks start where the message does: the block around element i lies
	// within the 256-element grid blocks k-1, k and k+1 of i's block k.
	const blk = compress.Int8Block
	grid := make([]float32, (len(absSum)+blk-1)/blk)
	for i, v := range absSum {
		grid[i/blk] = max(grid[i/blk], v)
	}
	w := make([]float32, len(absSum))
	for i := range w {
		k := i / blk
		w[i] = max(grid[k], grid[max(k-1, 0)], grid[min(k+1, len(grid)-1)])
	}
	codec.ErrorBound(bound, w)
	for i := range bound {
		bound[i] = float32(2*p)*bound[i] + float32(p)*absSum[i]/(1<<23)
	}
	return nil
}
