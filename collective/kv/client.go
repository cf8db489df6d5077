package kv

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/hetsync/hetsync/service"
)

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

// inPlace says whether this rank's own request op to its own shard is served in place, without
// the transport: every request except, behind an SSP gate, the pulling requests the gate may
// hold (their replies are parked and sent by a reader).
func (s *Service) inPlace(op uint8) bool {
	if s.local == nil {
		return false
	}
	return s.local.gate == nil || op == opPush || op == opPushNew
}

func (s *Service) call(ctx context.Context, op uint8, g, w []float32, clock uint64, stopVote bool) (Reply, error) {
	n := s.bounds[len(s.bounds)-1]
	if pushes(op) && len(g) != n {
		return Reply{}, fmt.Errorf("kv: rank %d: %s of %d values, the model has %d", s.rank, opName(op), len(g), n)
	}
	if pulls(op) && len(w) != n {
		return Reply{}, fmt.Errorf("kv: rank %d: %s into %d values, the model has %d", s.rank, opName(op), len(w), n)
	}
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if err := s.svc.Err(); err != nil {
		return Reply{}, err
	}
	var flags uint8
	if stopVote {
		flags = flagStop
	}
	local := s.inPlace(op)
	for i, srv := range s.servers {
		if local && srv == s.rank {
			continue // served in place below, while the remote servers work
		}
		m := service.Msg{Op: op, Flags: flags, Arg: clock, Aux: uint32(i)}
		if pushes(op) {
			m.Body = asBytes(g[s.bounds[i]:s.bounds[i+1]])
		}
		if err := s.svc.Ask(ctx, srv, m); err != nil {
			return Reply{}, err
		}
	}
	rep := Reply{MinClock: ^uint64(0)}
	var firstErr error
	if local {
		i := s.shardOf[s.rank]
		lo, hi := s.bounds[i], s.bounds[i+1]
		var gi, dst []float32
		if pushes(op) {
			gi = g[lo:hi]
		}
		if pulls(op) {
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
		if pulls(op) {
			dst = w[s.bounds[i]:s.bounds[i+1]]
		}
		s.fresh[i] = false
		if err := s.collect(ctx, srv, i, op, dst, &rep); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return rep, firstErr
}

// callLocal serves this rank's request op to the shard it hosts (index i) in place: the push
// reads g directly and a pull copies into dst, with no message, copy or goroutine switch in
// between. Like Serve, it then sends the held replies the request released.
func (s *Service) callLocal(ctx context.Context, i int, op uint8, g, dst []float32, clock uint64, stopVote bool, rep *Reply) error {
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
		rel = sh.releaseHeld(rel)
	}
	sh.mu.Unlock()
	err = sendReleased(ctx, s.svc, rel)
	s.localRel = rel[:0]
	return err
}

// collect waits for the reply of server srv (shard i) and folds it into rep.
func (s *Service) collect(ctx context.Context, srv, i int, op uint8, dst []float32, rep *Reply) error {
	r, err := s.svc.Wait(ctx, srv)
	if err != nil {
		return err
	}
	defer r.Release()
	if int(r.Aux) != i {
		return fmt.Errorf("kv: rank %d: server rank %d answered %s for shard %d, expected shard %d", s.rank, srv, opName(op), r.Aux, i)
	}
	if r.Flags&flagModel == 0 {
		dst = nil // a push, or a push-pull-if-newer with nothing new
	}
	if len(r.Body) != preamble+4*len(dst) {
		return fmt.Errorf("kv: rank %d: %s reply from server rank %d has %d bytes, want %d",
			s.rank, opName(op), srv, len(r.Body), preamble+4*len(dst))
	}
	if r.Flags&flagModel != 0 {
		copy(dst, asF32(r.Body[preamble:]))
		s.fresh[i] = true
		rep.Fresh++
	}
	rep.Stop = rep.Stop || r.Flags&flagStop != 0
	rep.Version = max(rep.Version, r.Arg)
	rep.MinClock = min(rep.MinClock, binary.LittleEndian.Uint64(r.Body[0:8]))
	rep.Staleness = max(rep.Staleness, binary.LittleEndian.Uint64(r.Body[8:16]))
	rep.ClockSum = max(rep.ClockSum, binary.LittleEndian.Uint64(r.Body[16:24]))
	return nil
}

// Close says bye to every server and waits until every worker has said bye to this rank's
// shard, then stops the readers. Every rank must call Close once training ends; a rank that
// hosts a shard returns only after all workers are done with it.
func (s *Service) Close(ctx context.Context) error {
	if err := s.svc.Close(ctx); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}
