package collective

import (
	"fmt"
	"math"
)

// replay runs the schedules of all ranks against each other with unbounded buffering, in an
// order that respects every dependency, and reports the first inconsistency: a receive whose
// message has another size or tag than its send, a message nobody receives, or a deadlock.
// It keeps an α-β clock per rank: a send occupies the sender's link for α + bytes·β, a receive
// completes when its message has arrived and the receiver's link has taken its bytes. With
// masks non-nil it also tracks, per rank and element, the set of ranks whose contribution the
// element holds, and fails when a reduction would count a contribution twice.
func replay(scheds []*schedule, elemSize int, alpha, beta float64, masks [][]uint64) (float64, error) {
	p := len(scheds)
	type msg struct {
		arrival float64
		lo, hi  int
		tag     uint32
		data    []uint64
	}
	queues := make([][]msg, p*p) // index from*p+to
	type state struct {
		si, ri             int
		sendFree, recvFree float64
		sendDone, recvDone []float64
	}
	st := make([]state, p)
	for r := range st {
		st[r].sendDone = make([]float64, len(scheds[r].sends))
		st[r].recvDone = make([]float64, len(scheds[r].recvs))
	}
	for {
		progress := false
		done := true
		for r := 0; r < p; r++ {
			s, x := scheds[r], &st[r]
			for x.si < len(s.sends) {
				step := s.sends[x.si]
				if x.ri < step.need {
					break
				}
				start := x.sendFree
				if step.need > 0 {
					start = math.Max(start, x.recvDone[step.need-1])
				}
				bytes := float64((step.hi - step.lo) * elemSize)
				x.sendFree = start + alpha + bytes*beta
				x.sendDone[x.si] = x.sendFree
				m := msg{arrival: x.sendFree, lo: step.lo, hi: step.hi, tag: step.tag}
				if masks != nil && !step.aux {
					m.data = append([]uint64(nil), masks[r][step.lo:step.hi]...)
				}
				queues[r*p+step.peer] = append(queues[r*p+step.peer], m)
				x.si++
				progress = true
			}
			for x.ri < len(s.recvs) {
				step := s.recvs[x.ri]
				q := &queues[step.peer*p+r]
				if x.si < step.need || len(*q) == 0 {
					break
				}
				m := (*q)[0]
				*q = (*q)[1:]
				if m.hi-m.lo != step.hi-step.lo || m.tag != step.tag {
					return 0, fmt.Errorf("rank %d receive #%d (%v) from rank %d got a message of %d elements with tag %d",
						r, x.ri, step, step.peer, m.hi-m.lo, m.tag)
				}
				bytes := float64((step.hi - step.lo) * elemSize)
				t := math.Max(m.arrival, x.recvFree+bytes*beta)
				if step.need > 0 {
					t = math.Max(t, x.sendDone[step.need-1])
				}
				x.recvFree = t
				x.recvDone[x.ri] = t
				if masks != nil && m.data != nil {
					dst := masks[r][step.lo:step.hi]
					for i, v := range m.data {
						if step.kind == stepRecvReduce {
							if dst[i]&v != 0 {
								return 0, fmt.Errorf("rank %d receive #%d (%v): element %d would count ranks %#x twice",
									r, x.ri, step, step.lo+i, dst[i]&v)
							}
							dst[i] |= v
						} else {
							dst[i] = v
						}
					}
				}
				x.ri++
				progress = true
			}
			if x.si < len(s.sends) || x.ri < len(s.recvs) {
				done = false
			}
		}
		if done {
			break
		}
		if !progress {
			for r := 0; r < p; r++ {
				if x := st[r]; x.si < len(scheds[r].sends) || x.ri < len(scheds[r].recvs) {
					return 0, fmt.Errorf("deadlock: rank %d stuck at send %d/%d, receive %d/%d",
						r, x.si, len(scheds[r].sends), x.ri, len(scheds[r].recvs))
				}
			}
		}
	}
	for i, q := range queues {
		if len(q) > 0 {
			return 0, fmt.Errorf("rank %d sent %d message(s) to rank %d that were never received", i/p, len(q), i%p)
		}
	}
	end := 0.0
	for _, x := range st {
		end = math.Max(end, math.Max(x.sendFree, x.recvFree))
	}
	return end, nil
}

// buildAll builds the schedules of every rank.
func buildAll(alg algorithm, kind collKind, p, n, root, elemSize, segBytes int) []*schedule {
	scheds := make([]*schedule, p)
	for r := range scheds {
		scheds[r] = buildSchedule(alg, kind, p, r, n, root, elemSize, segBytes)
	}
	return scheds
}

// simulateKind predicts the time of one collective from its schedules.
func simulateKind(alg algorithm, kind collKind, p, n, elemSize, segBytes int, alpha, beta float64) (float64, error) {
	return replay(buildAll(alg, kind, p, n, 0, elemSize, segBytes), elemSize, alpha, beta, nil)
}

// Predict returns the α-β time in seconds of an allreduce of `bytes` bytes of float32 over p
// ranks with the named algorithm and the default segment size, replayed from its schedules:
// α is the per-message latency (s), β the time per byte (s/B). Each rank sends one message at a
// time and receives one at a time (one full-duplex NIC); reduction time is not modelled.
func Predict(alg string, p, bytes int, alpha, beta float64) (float64, error) {
	if p < 1 {
		return 0, fmt.Errorf("collective: Predict: p = %d, want >= 1", p)
	}
	if bytes < 0 || alpha < 0 || beta < 0 {
		return 0, fmt.Errorf("collective: Predict: negative bytes, alpha or beta")
	}
	opts := Options{Algorithm: alg}
	a, err := lookupAlgorithm(alg, opts)
	if err != nil {
		return 0, err
	}
	return simulateKind(a, kindAllReduce, p, bytes/4, 4, DefaultSegmentBytes, alpha, beta)
}
