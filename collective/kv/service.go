package kv

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/hetsync/hetsync/transport"
)

// Config describes the service. Every rank of the job starts the service with the same Len,
// Servers and Channel; server ranks also give Init and Rule.
type Config struct {
	// Len is the number of float32 values in the model vector.
	Len int
	// Servers are the ranks hosting shards, in shard order. Empty means rank 0 alone. Listing
	// every rank colocates one shard with each worker.
	Servers []int
	// Init is the initial model (Len values). Required on server ranks; each server copies
	// its shard from it. Other ranks may leave it nil.
	Init []float32
	// Rule builds the update rule of each hosted shard. Required on server ranks.
	Rule RuleFactory
	// Channel carries the service's traffic. Zero means transport.ChanPS (the collective
	// channel cannot be used: its FIFO belongs to collective.Comm).
	Channel transport.Channel
	// SSP, when set, is the stale-synchronous gate of the servers: a request that pulls
	// (Pull, PushPull) from a worker more than SSP.Staleness clocks ahead of the slowest
	// worker is answered only once the slowest catches up, or once training stops. Pushes
	// are never held. Nil means no gate.
	SSP *SSPGate
}

// SSPGate is the bound of stale synchronous parallel: worker i's pull is answered only while
// c_i − min_j c_j ≤ Staleness, with c the clocks the workers sent (Staleness 0 is BSP). A
// worker that said bye leaves the minimum.
type SSPGate struct {
	Staleness uint64
}

// Blocked says whether a worker at clock is held when the slowest worker is at minClock.
func (g SSPGate) Blocked(clock, minClock uint64) bool {
	return clock > minClock && clock-minClock > g.Staleness
}

// Validate checks the configuration for a job of size ranks as seen by rank.
func (c Config) Validate(rank, size int) error {
	if size < 1 {
		return fmt.Errorf("kv: job size must be ≥ 1, got %d", size)
	}
	if rank < 0 || rank >= size {
		return fmt.Errorf("kv: rank %d out of range [0, %d)", rank, size)
	}
	if c.Len < 0 {
		return fmt.Errorf("kv: rank %d: model length must be ≥ 0, got %d", rank, c.Len)
	}
	seen := make(map[int]bool, len(c.Servers))
	for _, s := range c.Servers {
		if s < 0 || s >= size {
			return fmt.Errorf("kv: rank %d: server rank %d out of range [0, %d)", rank, s, size)
		}
		if seen[s] {
			return fmt.Errorf("kv: rank %d: server rank %d listed twice", rank, s)
		}
		seen[s] = true
	}
	if len(c.Servers) == 0 {
		seen[0] = true
	}
	if seen[rank] {
		if len(c.Init) != c.Len {
			return fmt.Errorf("kv: rank %d hosts a shard but Init has %d values, want Len=%d", rank, len(c.Init), c.Len)
		}
		if c.Rule == nil {
			return fmt.Errorf("kv: rank %d hosts a shard but no update rule was given", rank)
		}
	}
	return nil
}

// Reply is what a client call learned from the servers.
type Reply struct {
	// Stop is set once rank 0 (or any rank) voted to stop through any server.
	Stop bool
	// Version is the largest shard version seen (updates published by that shard).
	Version uint64
	// MinClock is the smallest worker clock the servers know.
	MinClock uint64
	// Staleness is the largest staleness of this push over the shards: updates published
	// between this worker's last pull and this push. Zero for a pull.
	Staleness uint64
	// Fresh is the number of shards whose values were copied into the caller's vector: all
	// of them for Pull and PushPull, those with a version the worker had not pulled yet for
	// PushPullIfNewer (Service.Fresh says which).
	Fresh int
	// ClockSum is the sum of the clocks of all workers as the servers know them (the largest
	// over the shards): with clocks counting completed steps, the job's steps so far.
	ClockSum uint64
}

// Operation codes and flags, packed into Header.Op under a magic.
const (
	opMagic   uint32 = 0x4b560000 // "KV"
	opMask    uint32 = 0xff
	opPush    uint32 = 1
	opPull    uint32 = 2
	opPushPul uint32 = 3
	opBye     uint32 = 4
	opPushNew uint32 = 5 // push, and pull only the shards published since this worker's last pull

	flagReply uint32 = 1 << 8
	flagStop  uint32 = 1 << 9
	flagError uint32 = 1 << 10
	flagModel uint32 = 1 << 11 // the reply carries the shard's values

	magicMask uint32 = 0xffff0000
	preamble         = 24 // reply preamble: min clock, staleness, clock sum
)

func opName(op uint32) string {
	switch op & opMask {
	case opPush:
		return "push"
	case opPull:
		return "pull"
	case opPushPul:
		return "push-pull"
	case opBye:
		return "bye"
	case opPushNew:
		return "push-pull-if-newer"
	}
	return fmt.Sprintf("op(%d)", op&opMask)
}

// Service is one rank's part of the parameter server: its hosted shard (if any), its client,
// and one reader goroutine per peer. Client calls (Push, Pull, PushPull) must not run
// concurrently with each other.
type Service struct {
	ep        transport.Endpoint
	rank      int
	size      int
	ch        transport.Channel
	servers   []int
	shardOf   []int  // rank → shard index, -1 when the rank hosts none
	bounds    []int  // shard i is [bounds[i], bounds[i+1])
	fresh     []bool // per shard: the last call copied its values
	local     *serverShard
	localRel  []released // held replies released by this rank's own requests (callLocal)
	peers     []*peer
	callMu    sync.Mutex
	closeOnce sync.Once
	cancel    context.CancelFunc
	readers   sync.WaitGroup
	errMu     sync.Mutex
	err       error
}

type peer struct {
	rank     int
	buf      []byte        // receive buffer of this peer's reader
	reply    []byte        // this rank's server replies to the peer from here
	replies  chan replyMsg // reader → client: a reply is in buf
	consumed chan struct{} // client → reader: buf may be reused
	dead     chan struct{} // closed when the reader stops on an error
	deadErr  error         // set before dead is closed
	release  []released    // held replies this peer's reader must send (server ranks)
}

// released is a held reply, ready in the reply buffer of peer to.
type released struct {
	to int
	h  transport.Header
	n  int
}

// heldReq is a pulling request the SSP gate holds until its worker may go on.
type heldReq struct {
	on        bool
	op        uint32
	segment   uint32
	staleness uint64
}

type replyMsg struct {
	h transport.Header
	n int
}

// serverShard is the state of the shard this rank hosts.
type serverShard struct {
	mu            sync.Mutex
	shard         Shard
	rule          Rule
	pulledVersion []uint64 // per worker: shard version at its last pull
	clocks        []uint64 // per worker: last clock seen
	stop          bool
	gate          *SSPGate  // nil: no SSP gate
	held          []heldReq // per worker: a held pulling request
	gone          []bool    // per worker: said bye (its clock leaves the minimum)
}

// Start starts this rank's part of the service. Every rank of the job must call Start with
// the same Len, Servers and Channel. ctx bounds the service's whole life: cancelling it aborts
// every reader and pending call.
func Start(ctx context.Context, ep transport.Endpoint, cfg Config) (*Service, error) {
	rank, size := ep.Rank(), ep.Size()
	if err := cfg.Validate(rank, size); err != nil {
		return nil, err
	}
	servers := cfg.Servers
	if len(servers) == 0 {
		servers = []int{0}
	}
	ch := cfg.Channel
	if ch == 0 {
		ch = transport.ChanPS
	}
	s := &Service{
		ep: ep, rank: rank, size: size, ch: ch,
		servers: append([]int(nil), servers...),
		shardOf: make([]int, size),
		bounds:  make([]int, len(servers)+1),
		fresh:   make([]bool, len(servers)),
	}
	maxShard := 0
	for i := range s.shardOf {
		s.shardOf[i] = -1
	}
	for i, r := range servers {
		lo, hi := split(cfg.Len, len(servers), i)
		s.bounds[i], s.bounds[i+1] = lo, hi
		s.shardOf[r] = i
		maxShard = max(maxShard, hi-lo)
	}
	if i := s.shardOf[rank]; i >= 0 {
		lo, hi := s.bounds[i], s.bounds[i+1]
		sh := &serverShard{
			shard:         Shard{Index: i, Offset: lo, W: append([]float32(nil), cfg.Init[lo:hi]...), Workers: size},
			pulledVersion: make([]uint64, size),
			clocks:        make([]uint64, size),
			held:          make([]heldReq, size),
			gone:          make([]bool, size),
		}
		if cfg.SSP != nil {
			g := *cfg.SSP
			sh.gate = &g
		}
		rule, err := cfg.Rule(&sh.shard)
		if err != nil {
			return nil, fmt.Errorf("kv: rank %d: update rule for shard %d: %w", rank, i, err)
		}
		sh.rule = rule
		s.local = sh
		s.localRel = make([]released, 0, size)
	}
	// A message is at most a full shard plus the reply preamble; error replies carry text.
	bufLen := max(preamble+4*maxShard, 512)
	ctx, s.cancel = context.WithCancel(ctx)
	s.peers = make([]*peer, size)
	for p := range s.peers {
		pr := &peer{
			rank:     p,
			buf:      make([]byte, bufLen),
			replies:  make(chan replyMsg),
			consumed: make(chan struct{}),
			dead:     make(chan struct{}),
		}
		if s.local != nil {
			pr.reply = make([]byte, bufLen)
			pr.release = make([]released, 0, size)
		}
		s.peers[p] = pr
	}
	for _, pr := range s.peers {
		needBye := s.local != nil          // the peer's client will say bye to our shard
		needAck := s.shardOf[pr.rank] >= 0 // our client will say bye to the peer's shard
		if !needBye && !needAck {
			continue
		}
		s.readers.Add(1)
		go s.read(ctx, pr, needBye, needAck)
	}
	return s, nil
}

// Rank is this rank; Servers the ranks hosting shards, in shard order.
func (s *Service) Rank() int      { return s.rank }
func (s *Service) Servers() []int { return append([]int(nil), s.servers...) }

// ShardRange is the part [lo, hi) of the model vector that shard i holds.
func (s *Service) ShardRange(i int) (lo, hi int) { return s.bounds[i], s.bounds[i+1] }

// Err is the first error a reader met, or nil.
func (s *Service) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *Service) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

// read is the reader goroutine for one peer: it serves the peer's requests to this rank's
// shard and hands the peer's replies to this rank's client. It ends once the peer's client
// said bye to this rank's shard and this rank's client got the peer's bye acknowledgement.
func (s *Service) read(ctx context.Context, pr *peer, needBye, needAck bool) {
	defer s.readers.Done()
	die := func(err error) {
		pr.deadErr = err
		close(pr.dead)
		s.fail(err)
	}
	for needBye || needAck {
		h, n, err := s.ep.RecvAny(ctx, pr.rank, s.ch, pr.buf)
		if err != nil {
			die(fmt.Errorf("kv: rank %d: receiving from rank %d: %w", s.rank, pr.rank, err))
			return
		}
		if h.Op&magicMask != opMagic {
			die(fmt.Errorf("kv: rank %d: message from rank %d is not a parameter-server message (%v)", s.rank, pr.rank, h))
			return
		}
		if h.Op&flagReply != 0 {
			if h.Op&opMask == opBye {
				needAck = false
			}
			select {
			case pr.replies <- replyMsg{h: h, n: n}:
			case <-ctx.Done():
				die(fmt.Errorf("kv: rank %d: reply from rank %d not collected: %w", s.rank, pr.rank, ctx.Err()))
				return
			}
			select {
			case <-pr.consumed:
			case <-ctx.Done():
				die(fmt.Errorf("kv: rank %d: reply from rank %d not collected: %w", s.rank, pr.rank, ctx.Err()))
				return
			}
			continue
		}
		if h.Op&opMask == opBye {
			needBye = false
		}
		if err := s.serve(ctx, pr, h, pr.buf[:n]); err != nil {
			die(err)
			return
		}
	}
}

// serve handles one request from pr and sends the reply, unless the SSP gate holds it; then
// it sends the held replies that this request released (a push that raised the slowest
// clock, a bye, a stop vote). Held replies are queued, never waited for: this goroutine also
// carries this rank's own replies from pr.
func (s *Service) serve(ctx context.Context, pr *peer, h transport.Header, payload []byte) error {
	op := h.Op & opMask
	rh := transport.Header{Channel: s.ch, Op: opMagic | op | flagReply, Segment: h.Segment}
	sh := s.local
	var out []byte
	held := false
	rel := pr.release[:0]
	if sh == nil || int(h.Segment) != sh.shard.Index {
		out = s.errorReply(pr, &rh, fmt.Sprintf("rank %d hosts no shard %d", s.rank, h.Segment))
	} else {
		var err error
		sh.mu.Lock()
		out, held, err = s.apply(sh, pr, &rh, h, payload)
		if sh.gate != nil {
			rel = s.releaseHeld(sh, rel)
		}
		sh.mu.Unlock()
		if err != nil {
			out, held = s.errorReply(pr, &rh, err.Error()), false
		}
	}
	if !held {
		if err := s.ep.Send(ctx, pr.rank, rh, out); err != nil {
			return fmt.Errorf("kv: rank %d: %s reply to rank %d: %w", s.rank, opName(op), pr.rank, err)
		}
	}
	if err := s.sendReleased(ctx, rel); err != nil {
		return err
	}
	if pr.release != nil {
		pr.release = rel[:0]
	}
	return nil
}

func (s *Service) errorReply(pr *peer, rh *transport.Header, msg string) []byte {
	buf := pr.reply
	if buf == nil { // this rank hosts no shard: the peer's reader buffer is free until we reply
		buf = make([]byte, 512)
	}
	rh.Op |= flagError
	return buf[:copy(buf, msg)]
}

// apply runs one request against the hosted shard (whose lock the caller holds) and fills
// pr.reply; held reports that the SSP gate keeps the reply back.
func (s *Service) apply(sh *serverShard, pr *peer, rh *transport.Header, h transport.Header, payload []byte) (out []byte, held bool, err error) {
	op := h.Op & opMask
	w := pr.rank
	if op == opPush || op == opPushPul || op == opPushNew {
		if len(payload) != 4*len(sh.shard.W) {
			return nil, false, fmt.Errorf("rank %d: %s from rank %d to shard %d carries %d bytes, want %d (%d values)",
				s.rank, opName(op), w, sh.shard.Index, len(payload), 4*len(sh.shard.W), len(sh.shard.W))
		}
	}
	staleness, held, err := s.handle(sh, w, op, h.Seq, h.Op&flagStop != 0, asF32(payload))
	if err != nil {
		return nil, false, err
	}
	if held {
		sh.held[w] = heldReq{on: true, op: op, segment: h.Segment, staleness: staleness}
		return nil, true, nil
	}
	return s.fillReply(sh, w, op, staleness, rh), false, nil
}

// handle runs worker w's request op (clock, stop vote, pushed values g of the shard's length)
// against the hosted shard, whose lock the caller holds, and says whether the SSP gate holds
// the reply. It serves requests from the network (apply) and this rank's own (callLocal).
func (s *Service) handle(sh *serverShard, w int, op uint32, clock uint64, stopVote bool, g []float32) (staleness uint64, held bool, err error) {
	switch op {
	case opPush, opPushPul, opPushNew:
		sh.clocks[w] = clock
		staleness = sh.shard.Version - sh.pulledVersion[w]
		published, err := sh.rule.Push(&sh.shard, Push{Worker: w, Clock: clock, Staleness: staleness, G: g})
		if err != nil {
			return 0, false, fmt.Errorf("rank %d: shard %d: push from rank %d: %w", s.rank, sh.shard.Index, w, err)
		}
		if published {
			sh.shard.Version++
		}
	case opPull:
		sh.clocks[w] = clock
	case opBye:
		sh.gone[w] = true
	default:
		return 0, false, fmt.Errorf("rank %d: unknown request %s from rank %d", s.rank, opName(op), w)
	}
	if stopVote {
		sh.stop = true
	}
	held = sh.gate != nil && !sh.stop && (op == opPull || op == opPushPul) && sh.gate.Blocked(sh.clocks[w], sh.minClock())
	return staleness, held, nil
}

// pulls says whether worker w's request op takes the shard's values, and if so records the
// pull (the caller holds the shard's lock and copies the values).
func (sh *serverShard) pulls(w int, op uint32) bool {
	if op == opPull || op == opPushPul || (op == opPushNew && sh.shard.Version > sh.pulledVersion[w]) {
		sh.rule.Pulled(&sh.shard, w)
		sh.pulledVersion[w] = sh.shard.Version
		return true
	}
	return false
}

// clockSum is the sum of the workers' clocks.
func (sh *serverShard) clockSum() uint64 {
	var sum uint64
	for _, c := range sh.clocks {
		sum += c
	}
	return sum
}

// fillReply writes the reply of worker w's request op into the worker's reply buffer and
// completes rh; the caller holds the shard's lock.
func (s *Service) fillReply(sh *serverShard, w int, op uint32, staleness uint64, rh *transport.Header) []byte {
	buf := s.peers[w].reply
	out := buf[:preamble]
	if sh.pulls(w, op) {
		n := copy(asF32(buf[preamble:preamble+4*len(sh.shard.W)]), sh.shard.W)
		out = buf[:preamble+4*n]
		rh.Op |= flagModel
	}
	binary.LittleEndian.PutUint64(out[0:8], sh.minClock())
	binary.LittleEndian.PutUint64(out[8:16], staleness)
	binary.LittleEndian.PutUint64(out[16:24], sh.clockSum())
	rh.Seq = sh.shard.Version
	if sh.stop {
		rh.Op |= flagStop
	}
	return out
}

// inPlace says whether this rank's own request op to its own shard is served in place, without
// the transport: every request except a bye (which the shard's reader for this rank waits for)
// and, behind an SSP gate, the pulling requests the gate may hold (their replies are parked
// and sent by a reader).
func (s *Service) inPlace(op uint32) bool {
	if s.local == nil || op == opBye {
		return false
	}
	return s.local.gate == nil || op == opPush || op == opPushNew
}

// callLocal serves this rank's request op to the shard it hosts (index i) in place: the push
// reads g directly and a pull copies into dst, with no message, copy or goroutine switch in
// between. Like serve, it then sends the held replies the request released.
func (s *Service) callLocal(ctx context.Context, i int, op uint32, g, dst []float32, clock uint64, stopVote bool, rep *Reply) error {
	sh := s.local
	w := s.rank
	sh.mu.Lock()
	staleness, _, err := s.handle(sh, w, op, clock, stopVote, g)
	if err != nil {
		sh.mu.Unlock()
		return fmt.Errorf("kv: rank %d: %s to its own shard %d: %w", s.rank, opName(op), i, err)
	}
	if dst != nil && sh.pulls(w, op) {
		copy(dst, sh.shard.W)
		s.fresh[i] = true
		rep.Fresh++
	}
	rep.Stop = rep.Stop || sh.stop
	rep.Version = max(rep.Version, sh.shard.Version)
	rep.MinClock = min(rep.MinClock, sh.minClock())
	rep.Staleness = max(rep.Staleness, staleness)
	rep.ClockSum = max(rep.ClockSum, sh.clockSum())
	rel := s.localRel[:0]
	if sh.gate != nil {
		rel = s.releaseHeld(sh, rel)
	}
	sh.mu.Unlock()
	s.localRel = rel[:0]
	if err := s.sendReleased(ctx, rel); err != nil {
		s.fail(err)
		return err
	}
	return nil
}

// sendReleased sends the held replies that releaseHeld filled.
func (s *Service) sendReleased(ctx context.Context, rel []released) error {
	for _, r := range rel {
		if err := s.ep.Send(ctx, r.to, r.h, s.peers[r.to].reply[:r.n]); err != nil {
			return fmt.Errorf("kv: rank %d: held %s reply to rank %d: %w", s.rank, opName(r.h.Op), r.to, err)
		}
	}
	return nil
}

// releaseHeld fills the replies of the held requests that may go on now (their worker is
// within the bound again, or training stops) and appends them to rel.
func (s *Service) releaseHeld(sh *serverShard, rel []released) []released {
	minClock := sh.minClock()
	for w := range sh.held {
		hr := sh.held[w]
		if !hr.on || (!sh.stop && sh.gate.Blocked(sh.clocks[w], minClock)) {
			continue
		}
		sh.held[w] = heldReq{}
		rh := transport.Header{Channel: s.ch, Op: opMagic | hr.op | flagReply, Segment: hr.segment}
		out := s.fillReply(sh, w, hr.op, hr.staleness, &rh)
		rel = append(rel, released{to: w, h: rh, n: len(out)})
	}
	return rel
}

// minClock is the smallest clock of the workers still training (all clocks when every
// worker said bye).
func (sh *serverShard) minClock() uint64 {
	m, some := ^uint64(0), false
	for w, c := range sh.clocks {
		if !sh.gone[w] {
			m, some = min(m, c), true
		}
	}
	if !some {
		m = slices.Min(sh.clocks)
	}
	return m
}

// Push sends g (the full model-length vector; each server gets its shard) without pulling.
func (s *Service) Push(ctx context.Context, g []float32, clock uint64, stopVote bool) (Reply, error) {
	return s.call(ctx, opPush, g, nil, clock, stopVote)
}

// Pull copies the current model into w (full length).
func (s *Service) Pull(ctx context.Context, w []float32, clock uint64) (Reply, error) {
	return s.call(ctx, opPull, nil, w, clock, false)
}

// PushPull pushes g and copies the model as it is after the push into w. g and w may alias.
func (s *Service) PushPull(ctx context.Context, g, w []float32, clock uint64, stopVote bool) (Reply, error) {
	return s.call(ctx, opPushPul, g, w, clock, stopVote)
}

// PushPullIfNewer pushes g and copies into w only the shards that published a version since
// this worker's last pull (WBSP's "new global model on the next upload after the trigger");
// the other parts of w are left as they are. Reply.Fresh counts the copied shards and Fresh
// says which. g and w may alias.
func (s *Service) PushPullIfNewer(ctx context.Context, g, w []float32, clock uint64, stopVote bool) (Reply, error) {
	return s.call(ctx, opPushNew, g, w, clock, stopVote)
}

// Fresh reports whether the last client call copied shard i's values into the caller's
// vector.
func (s *Service) Fresh(i int) bool { return s.fresh[i] }

func (s *Service) call(ctx context.Context, op uint32, g, w []float32, clock uint64, stopVote bool) (Reply, error) {
	n := s.bounds[len(s.bounds)-1]
	if (op == opPush || op == opPushPul || op == opPushNew) && len(g) != n {
		return Reply{}, fmt.Errorf("kv: rank %d: %s of %d values, the model has %d", s.rank, opName(op), len(g), n)
	}
	if (op == opPull || op == opPushPul || op == opPushNew) && len(w) != n {
		return Reply{}, fmt.Errorf("kv: rank %d: %s into %d values, the model has %d", s.rank, opName(op), len(w), n)
	}
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if err := s.Err(); err != nil {
		return Reply{}, err
	}
	hop := opMagic | op
	if stopVote {
		hop |= flagStop
	}
	local := s.inPlace(op)
	for i, srv := range s.servers {
		if local && srv == s.rank {
			continue // served in place below, while the remote servers work
		}
		var payload []byte
		if op == opPush || op == opPushPul || op == opPushNew {
			payload = asBytes(g[s.bounds[i]:s.bounds[i+1]])
		}
		h := transport.Header{Channel: s.ch, Op: hop, Seq: clock, Segment: uint32(i)}
		if err := s.ep.Send(ctx, srv, h, payload); err != nil {
			return Reply{}, fmt.Errorf("kv: rank %d: %s to server rank %d: %w", s.rank, opName(op), srv, err)
		}
	}
	var rep Reply
	rep.MinClock = ^uint64(0)
	var firstErr error
	if local {
		i := s.shardOf[s.rank]
		lo, hi := s.bounds[i], s.bounds[i+1]
		var gi, dst []float32
		if op == opPush || op == opPushPul || op == opPushNew {
			gi = g[lo:hi]
		}
		if op == opPull || op == opPushPul || op == opPushNew {
			dst = w[lo:hi]
		}
		s.fresh[i] = false
		firstErr = s.callLocal(ctx, i, op, gi, dst, clock, stopVote, &rep)
	}
	for i, srv := range s.servers {
		if local && srv == s.rank {
			continue
		}
		var dst []float32
		if op == opPull || op == opPushPul || op == opPushNew {
			dst = w[s.bounds[i]:s.bounds[i+1]]
		}
		s.fresh[i] = false
		if err := s.collect(ctx, srv, i, op, dst, &rep); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return rep, firstErr
}

// collect waits for the reply of server srv (shard i) and folds it into rep.
func (s *Service) collect(ctx context.Context, srv, i int, op uint32, dst []float32, rep *Reply) error {
	pr := s.peers[srv]
	var m replyMsg
	select {
	case m = <-pr.replies:
	case <-pr.dead:
		return pr.deadErr
	case <-ctx.Done():
		// The reply may still come and would be taken for the next call's: the service is
		// unusable from here on.
		err := fmt.Errorf("kv: rank %d: waiting for %s reply from server rank %d: %w", s.rank, opName(op), srv, ctx.Err())
		s.fail(err)
		return err
	}
	defer func() { pr.consumed <- struct{}{} }()
	body := pr.buf[:m.n]
	if m.h.Op&flagError != 0 {
		return fmt.Errorf("kv: rank %d: server rank %d refused %s: %s", s.rank, srv, opName(op), body)
	}
	if m.h.Op&opMask != op || int(m.h.Segment) != i {
		return fmt.Errorf("kv: rank %d: server rank %d answered %s for shard %d, expected %s for shard %d",
			s.rank, srv, opName(m.h.Op), m.h.Segment, opName(op), i)
	}
	if m.h.Op&flagModel == 0 {
		dst = nil // a push, a bye, or a push-pull-if-newer with nothing new
	}
	if len(body) != preamble+4*len(dst) {
		return fmt.Errorf("kv: rank %d: %s reply from server rank %d has %d bytes, want %d",
			s.rank, opName(op), srv, len(body), preamble+4*len(dst))
	}
	if m.h.Op&flagModel != 0 {
		copy(dst, asF32(body[preamble:]))
		s.fresh[i] = true
		rep.Fresh++
	}
	rep.Stop = rep.Stop || m.h.Op&flagStop != 0
	rep.Version = max(rep.Version, m.h.Seq)
	rep.MinClock = min(rep.MinClock, binary.LittleEndian.Uint64(body[0:8]))
	rep.Staleness = max(rep.Staleness, binary.LittleEndian.Uint64(body[8:16]))
	rep.ClockSum = max(rep.ClockSum, binary.LittleEndian.Uint64(body[16:24]))
	return nil
}

// Close says bye to every server and waits until every worker has said bye to this rank's
// shard, then stops the readers. Every rank must call Close once training ends; a rank that
// hosts a shard returns only after all workers are done with it.
func (s *Service) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		defer s.cancel()
		if e := s.Err(); e == nil {
			if _, e := s.call(ctx, opBye, nil, nil, 0, false); e != nil {
				err = e
				return
			}
		} else {
			err = e
			return
		}
		done := make(chan struct{})
		go func() { s.readers.Wait(); close(done) }()
		select {
		case <-done:
			err = s.Err()
		case <-ctx.Done():
			err = fmt.Errorf("kv: rank %d: waiting for the other workers to finish with this rank's shard: %w", s.rank, ctx.Err())
		}
	})
	return err
}

// Snapshot copies the hosted shard into dst (its length must match) and returns its version.
// It reports false when this rank hosts no shard.
func (s *Service) Snapshot(dst []float32) (uint64, bool) {
	sh := s.local
	if sh == nil {
		return 0, false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	copy(dst, sh.shard.W)
	return sh.shard.Version, true
}

// split is shard i's range when n values are spread over p shards, the first n mod p shards
// holding one value more (the same rule as collective.Partition).
func split(n, p, i int) (lo, hi int) {
	q, r := n/p, n%p
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

func asF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func asBytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
