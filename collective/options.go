package collective

import (
	"fmt"
	"time"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// DefaultSegmentBytes is the pipelining segment size when Options.SegmentBytes is 0: Gloo's
// kMaxSegmentSize and KungFu's chunk size. Calls of LargeCallBytes or more over an endpoint
// that asks for larger segments use those instead (see segmentFor).
const DefaultSegmentBytes = 1 << 20

// LargeCallBytes is the buffer size from which a call uses the endpoint's large segments
// (transport.LargeSegmenter) when Options.SegmentBytes is 0.
const LargeCallBytes = 32 << 20

// Options configure a Comm.
type Options struct {
	// Algorithm is a name of the Registry: "ring", "butterfly", "binary-blocks", "ps" or
	// "auto" (DefaultAlgorithm, when empty) among the built-in ones.
	Algorithm string
	// Registry holds the algorithms Algorithm names and auto chooses among; nil means
	// Builtin(). A communicator reads it once, in New.
	Registry *Registry
	// SegmentBytes is the largest message the collectives send; larger ranges are split into
	// segments that are pipelined. 0 means DefaultSegmentBytes, or for calls of LargeCallBytes
	// or more the endpoint's transport.LargeSegment when it has one.
	SegmentBytes int
	// Servers is, for "ps" only, the number of server ranks (ranks 0..Servers-1) that host the
	// shards; 0 means every rank (colocated servers).
	Servers int
	// Codec is the wire codec for payloads. The lossy casts (FP16, BF16) need float32 buffers.
	Codec transport.Codec
	// Compression encodes what float32 sums and averages of AllReduce send (compressed.go);
	// the zero value sends them as they are.
	Compression Compression
	// Links is the job's link matrix (hosts and per-pair costs), the same on every rank; with
	// it auto, ring order, ps placement and the hier- configurations plan from the network.
	Links *topology.Matrix
	// Timeout bounds every call whose context has no deadline, from when the call starts
	// running (after the calls issued before it): 0 means DefaultTimeout, NoTimeout (or any
	// negative value) no limit. A call whose context has a deadline runs until that deadline
	// instead, sooner or later. A call that runs out of time fails with a *TimeoutError and
	// leaves the communicator unusable.
	Timeout time.Duration
	// Watch says what the Comm reports while its calls run: stalls, a timeline (watchdog.go).
	Watch Watch
	// Replan tunes how auto re-plans when the network changes under the job (see
	// ReplanOptions); the zero value re-plans with the defaults.
	Replan ReplanOptions
}

// DefaultAlgorithm is the algorithm of Options whose Algorithm is empty.
const DefaultAlgorithm = autoName

// Validate checks the options against a job of p ranks, the algorithm built as New builds it
// (a configuration that plans from the link matrix needs Options.Links).
func (o Options) Validate(p int) error {
	_, err := o.build(p)
	return err
}

// Check is Validate without building the algorithm: the name must parse, but a configuration
// that plans from the link matrix is not refused for the lack of one, so that a caller whose
// matrix comes later (measured once the job has formed) can check its options before that.
func (o Options) Check(p int) error {
	o = o.withDefaults()
	if err := o.checkFields(p); err != nil {
		return err
	}
	_, err := registryOf(o).parse(o.Algorithm)
	return err
}

// build checks the options against a job of p ranks and builds their algorithm: the one
// place where a name is parsed and becomes an algorithm.
func (o Options) build(p int) (algorithm, error) {
	o = o.withDefaults()
	if err := o.checkFields(p); err != nil {
		return nil, err
	}
	return lookupAlgorithm(o.Algorithm, o)
}

// withDefaults is o with DefaultAlgorithm for an empty Algorithm.
func (o Options) withDefaults() Options {
	if o.Algorithm == "" {
		o.Algorithm = DefaultAlgorithm
	}
	return o
}

// checkFields checks every option but the algorithm's name.
func (o Options) checkFields(p int) error {
	if o.SegmentBytes < 0 {
		return fmt.Errorf("collective: SegmentBytes %d is negative", o.SegmentBytes)
	}
	if o.Servers < 0 || o.Servers > p {
		return fmt.Errorf("collective: Servers %d out of range [0, %d] for a job of %d ranks", o.Servers, p, p)
	}
	if o.Servers != 0 && !registryOf(o).hasServers(o.Algorithm) {
		return fmt.Errorf("collective: Servers is only meaningful with Algorithm \"ps\", not %q", o.Algorithm)
	}
	if err := validateLinks(o.Links, p); err != nil {
		return err
	}
	if err := o.Replan.Validate(); err != nil {
		return err
	}
	if o.Codec > transport.CodecBF16 {
		return fmt.Errorf("collective: unknown codec %d", o.Codec)
	}
	return o.Compression.check(o)
}
