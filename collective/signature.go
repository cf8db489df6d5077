package collective

import "github.com/hetsync/hetsync/transport"

// collKind names a collective; it is part of the op signature.
type collKind uint8

const (
	kindAllReduce collKind = iota + 1
	kindReduceScatter
	kindAllGather
	kindBroadcast
	kindReduce
	kindBarrier
	kindAllToAll
	kindPointToPoint
	kindAttribution // the stamps that end an attributed call (attrib.go)
)

func (k collKind) String() string {
	switch k {
	case kindAllReduce:
		return "allreduce"
	case kindReduceScatter:
		return "reduce-scatter"
	case kindAllGather:
		return "allgather"
	case kindBroadcast:
		return "broadcast"
	case kindReduce:
		return "reduce"
	case kindBarrier:
		return "barrier"
	case kindAllToAll:
		return "alltoall"
	case kindPointToPoint:
		return "send/recv"
	case kindAttribution:
		return "attribution"
	}
	return "collective?"
}

// abortOp is the op signature of the frame a rank sends to every peer when a collective fails
// on its side, so that peers blocked on it get an error instead of waiting forever.
const abortOp uint32 = 0xAB0A7ED0

// codecFor is the wire codec for a payload of dt: the configured one, except that integers go
// exactly when it is a lossy float cast (the public calls refuse them then; Split's own
// exchanges of ranks and channels use it).
func (c *Comm) codecFor(dt DType) transport.Codec {
	if c.opts.Codec.Lossy() && dt != Float32 {
		return transport.CodecNone
	}
	return c.opts.Codec
}

// signature hashes what every rank must agree on (FNV-1a, no allocation).
func (c *Comm) signature(kind collKind, dt DType, op ReduceOp, n, root int) uint32 {
	// A rank whose peers are not all on shared memory plans on another model and may choose
	// another algorithm: its calls must fail as different collectives, not mix.
	a, ok := c.alg.(*auto)
	return sigPrefix(kind, c.sigAlg, ok && a.sharedMemory()).args(dt, op, n, root)
}

// sigAlgorithm is the algorithm's part of the op signature: its name, and for auto over a
// registry other than Builtin's the algorithms it chooses among. Ranks whose registries differ
// may choose differently: their calls must fail as different collectives, not mix.
func sigAlgorithm(name string, alg algorithm) string {
	a, ok := alg.(*auto)
	if !ok {
		return name
	}
	mine, builtin := a.reg.fingerprint(), Builtin().fingerprint()
	if mine == builtin {
		return name
	}
	return name + "[" + mine + "]"
}

// sigHash is an op signature being hashed: FNV-1a's state.
type sigHash uint32

func (h sigHash) mix(b byte) sigHash { return (h ^ sigHash(b)) * 16777619 }

// sigPrefix hashes what a signature starts with: the collective, the algorithm's name and
// whether auto plans for shared memory.
func sigPrefix(kind collKind, alg string, shm bool) sigHash {
	h := sigHash(2166136261).mix(byte(kind))
	for i := 0; i < len(alg); i++ {
		h = h.mix(alg[i])
	}
	if shm {
		h = h.mix('s')
	}
	return h
}

// args ends the signature with the call's arguments.
func (h sigHash) args(dt DType, op ReduceOp, n, root int) uint32 {
	h = h.mix(byte(dt)).mix(byte(op))
	for i := 0; i < 64; i += 8 {
		h = h.mix(byte(uint64(n) >> i))
	}
	for i := 0; i < 64; i += 8 {
		h = h.mix(byte(uint64(root) >> i))
	}
	if uint32(h) == abortOp {
		h++
	}
	return uint32(h)
}
