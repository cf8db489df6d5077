package kv

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/hetsync/hetsync/service"
)

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
	reply         [][]byte  // per worker: its replies are built here
	release       [][]released
}

// heldReq is a pulling request the SSP gate holds until its worker may go on.
type heldReq struct {
	on        bool
	op        uint8
	staleness uint64
}

// released is a held reply, ready to go to worker to (its body in the shard's reply buffer
// of that worker).
type released struct {
	to int
	m  service.Msg
}

// newServerShard is shard i, [lo, hi) of cfg.Init, hosted by rank.
func newServerShard(rank, size, i int, cfg Config, lo, hi, bufLen int) (*serverShard, error) {
	sh := &serverShard{
		shard:         Shard{Index: i, Offset: lo, W: append([]float32(nil), cfg.Init[lo:hi]...), Workers: size},
		pulledVersion: make([]uint64, size),
		clocks:        make([]uint64, size),
		held:          make([]heldReq, size),
		gone:          make([]bool, size),
		reply:         make([][]byte, size),
		release:       make([][]released, size),
	}
	for w := range size {
		sh.reply[w] = make([]byte, bufLen)
		sh.release[w] = make([]released, 0, size)
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
	return sh, nil
}

// Serve handles worker r.Peer's request to this rank's shard and replies, unless the SSP gate
// holds the reply; then it sends the held replies that this request released (a push that
// raised the slowest clock, a stop vote). Held replies are queued, never waited for: the
// goroutine that calls Serve also carries this rank's own replies from the worker.
func (s *Service) Serve(ctx context.Context, svc *service.Service, r service.Request) error {
	w, sh := r.Peer, s.local
	if r.OneWay {
		return fmt.Errorf("a one-way %s: every request to the parameter server is answered", opName(r.Op))
	}
	if sh == nil || int(r.Aux) != sh.shard.Index {
		return svc.Fail(ctx, w, r.Op, fmt.Errorf("rank %d hosts no shard %d", s.rank, r.Aux))
	}
	sh.mu.Lock()
	m, held, err := s.apply(sh, w, r.Msg)
	rel := sh.release[w][:0]
	if sh.gate != nil {
		rel = sh.releaseHeld(rel)
	}
	sh.mu.Unlock()
	switch {
	case err != nil:
		if err := svc.Fail(ctx, w, r.Op, err); err != nil {
			return err
		}
	case !held:
		if err := svc.Reply(ctx, w, m); err != nil {
			return err
		}
	}
	err = sendReleased(ctx, svc, rel)
	sh.release[w] = rel[:0]
	return err
}

// Left takes worker w out of the slowest clock (it said bye) and sends the held replies that
// this released.
func (s *Service) Left(ctx context.Context, svc *service.Service, w int) error {
	sh := s.local
	if sh == nil {
		return nil
	}
	sh.mu.Lock()
	sh.gone[w] = true
	rel := sh.release[w][:0]
	if sh.gate != nil {
		rel = sh.releaseHeld(rel)
	}
	sh.mu.Unlock()
	err := sendReleased(ctx, svc, rel)
	sh.release[w] = rel[:0]
	return err
}

// apply runs worker w's request m against the hosted shard (whose lock the caller holds) and
// builds the reply; held reports that the SSP gate keeps the reply back.
func (s *Service) apply(sh *serverShard, w int, m service.Msg) (reply service.Msg, held bool, err error) {
	if pushes(m.Op) && len(m.Body) != 4*len(sh.shard.W) {
		return reply, false, fmt.Errorf("rank %d: %s from rank %d to shard %d carries %d bytes, want %d (%d values)",
			s.rank, opName(m.Op), w, sh.shard.Index, len(m.Body), 4*len(sh.shard.W), len(sh.shard.W))
	}
	var g []float32
	if pushes(m.Op) {
		g = asF32(m.Body)
	}
	staleness, held, err := s.handle(sh, w, m.Op, m.Arg, m.Flags&flagStop != 0, g)
	if err != nil {
		return reply, false, err
	}
	if held {
		sh.held[w] = heldReq{on: true, op: m.Op, staleness: staleness}
		return reply, true, nil
	}
	return sh.fillReply(w, m.Op, staleness), false, nil
}

// handle runs worker w's request op (clock, stop vote, pushed values g of the shard's length)
// against the hosted shard, whose lock the caller holds, and says whether the SSP gate holds
// the reply. It serves requests from the network (apply) and this rank's own (callLocal).
func (s *Service) handle(sh *serverShard, w int, op uint8, clock uint64, stopVote bool, g []float32) (staleness uint64, held bool, err error) {
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
func (sh *serverShard) pulls(w int, op uint8) bool {
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

// fillReply builds the reply to worker w's request op in the worker's reply buffer; the
// caller holds the shard's lock.
func (sh *serverShard) fillReply(w int, op uint8, staleness uint64) service.Msg {
	buf := sh.reply[w]
	m := service.Msg{Op: op, Aux: uint32(sh.shard.Index), Body: buf[:preamble]}
	if sh.pulls(w, op) {
		n := copy(asF32(buf[preamble:preamble+4*len(sh.shard.W)]), sh.shard.W)
		m.Body = buf[:preamble+4*n]
		m.Flags |= flagModel
	}
	binary.LittleEndian.PutUint64(m.Body[0:8], sh.minClock())
	binary.LittleEndian.PutUint64(m.Body[8:16], staleness)
	binary.LittleEndian.PutUint64(m.Body[16:24], sh.clockSum())
	m.Arg = sh.shard.Version
	if sh.stop {
		m.Flags |= flagStop
	}
	return m
}

// sendReleased sends the held replies that releaseHeld filled.
func sendReleased(ctx context.Context, svc *service.Service, rel []released) error {
	for _, r := range rel {
		if err := svc.Reply(ctx, r.to, r.m); err != nil {
			return fmt.Errorf("kv: held reply: %w", err)
		}
	}
	return nil
}

// releaseHeld fills the replies of the held requests that may go on now (their worker is
// within the bound again, or training stops) and appends them to rel.
func (sh *serverShard) releaseHeld(rel []released) []released {
	minClock := sh.minClock()
	for w := range sh.held {
		hr := sh.held[w]
		if !hr.on || (!sh.stop && sh.gate.Blocked(sh.clocks[w], minClock)) {
			continue
		}
		sh.held[w] = heldReq{}
		rel = append(rel, released{to: w, m: sh.fillReply(w, hr.op, hr.staleness)})
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
