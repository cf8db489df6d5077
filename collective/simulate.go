package collective

import (
	"fmt"
	"math"
)

// netModel is the network a replay runs on. Every message of b bytes from one rank to another
// costs α + b·β of the pair, occupies the sender's send side and the receiver's receive side
// (one full-duplex NIC per rank, one message at a time each way), and on its way crosses the
// shared resources of its path (a host's NIC shared by the ranks on it, a rack's uplink shared
// by its hosts), each of which carries one message at a time at its own rate. Without shared
// resources every rank is its own host on a private link: the plain α-β model.
type netModel struct {
	alpha func(from, to int) float64
	beta  func(from, to int) float64
	// path returns the shared resources a message from one rank to another crosses, nil when
	// none; a resource is an index into resBeta.
	path    func(from, to int) []int
	resBeta []float64
	// reduceBeta is the receiver's time per byte to reduce a received segment into its buffer,
	// after the segment has arrived: 0 on a network, where the links are far slower than the
	// reduction; on shared memory the reduction is a pass over the bytes like the copies.
	reduceBeta float64
}

// uniformModel is the α-β model with one (α, β) for every pair of ranks.
func uniformModel(alpha, beta float64) *netModel {
	return &netModel{
		alpha: func(int, int) float64 { return alpha },
		beta:  func(int, int) float64 { return beta },
		path:  func(int, int) []int { return nil },
	}
}

// replay runs the schedules of all ranks against each other with unbounded buffering, in an
// order that respects every dependency, and reports the first inconsistency: a receive whose
// message has another size or tag than its send, a message nobody receives, or a deadlock.
// It keeps a clock per rank on the model's network and returns when the last rank finishes.
// Sends are taken in the order of their start times (ties to the lower rank), so that a
// shared resource serves messages in the order they reach it. With masks non-nil it also
// tracks, per rank and element, the set of ranks whose contribution the element holds, and
// fails when a reduction would count a contribution twice.
func replay(scheds []*schedule, elemSize int, net *netModel, masks [][]uint64) (float64, error) {
	p := len(scheds)
	for _, s := range scheds {
		if s.err != nil {
			return 0, s.err
		}
	}
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
	resFree := make([]float64, len(net.resBeta))
	// sendStart is when rank r's next send can start, or +Inf when it waits for a receive.
	sendStart := func(r int) float64 {
		s, x := scheds[r], &st[r]
		if x.si >= len(s.sends) || x.ri < s.sends[x.si].need {
			return math.Inf(1)
		}
		start := x.sendFree
		if need := s.sends[x.si].need; need > 0 {
			start = math.Max(start, x.recvDone[need-1])
		}
		return start
	}
	for {
		progress := false
		// Every receive whose message is there completes; receives reserve nothing shared.
		for r := 0; r < p; r++ {
			s, x := scheds[r], &st[r]
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
				t := math.Max(m.arrival, x.recvFree+bytes*net.beta(step.peer, r))
				if step.need > 0 {
					t = math.Max(t, x.sendDone[step.need-1])
				}
				if step.kind == stepRecvReduce {
					t += bytes * net.reduceBeta
				}
				x.recvFree = t
				x.recvDone[x.ri] = t
				if masks != nil && m.data != nil {
					if err := mergeMask(masks[r][step.lo:step.hi], m.data, step, r, x.ri); err != nil {
						return 0, err
					}
				}
				x.ri++
				progress = true
			}
		}
		// Then the earliest send that can start.
		first, firstT := -1, math.Inf(1)
		for r := 0; r < p; r++ {
			if t := sendStart(r); t < firstT {
				first, firstT = r, t
			}
		}
		if first >= 0 {
			r, x := first, &st[first]
			step := scheds[r].sends[x.si]
			bytes := float64((step.hi - step.lo) * elemSize)
			t := firstT + net.alpha(r, step.peer)
			end := t + bytes*net.beta(r, step.peer)
			for _, u := range net.path(r, step.peer) {
				e := math.Max(t, resFree[u]) + bytes*net.resBeta[u]
				resFree[u] = e
				end = math.Max(end, e)
			}
			x.sendFree = end
			x.sendDone[x.si] = end
			m := msg{arrival: end, lo: step.lo, hi: step.hi, tag: step.tag}
			if masks != nil && !step.aux {
				m.data = append([]uint64(nil), masks[r][step.lo:step.hi]...)
			}
			queues[r*p+step.peer] = append(queues[r*p+step.peer], m)
			x.si++
			progress = true
		}
		if !progress {
			break
		}
	}
	for r := 0; r < p; r++ {
		if x := st[r]; x.si < len(scheds[r].sends) || x.ri < len(scheds[r].recvs) {
			return 0, fmt.Errorf("deadlock: rank %d stuck at send %d/%d, receive %d/%d",
				r, x.si, len(scheds[r].sends), x.ri, len(scheds[r].recvs))
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

// mergeMask applies a received contribution mask to dst: a reduction unions it in and fails
// on a contribution counted twice, a plain receive overwrites.
func mergeMask(dst, src []uint64, step step, rank, idx int) error {
	for i, v := range src {
		if step.kind == stepRecvReduce {
			if dst[i]&v != 0 {
				return fmt.Errorf("rank %d receive #%d (%v): element %d would count ranks %#x twice",
					rank, idx, step, step.lo+i, dst[i]&v)
			}
			dst[i] |= v
		} else {
			dst[i] = v
		}
	}
	return nil
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
func simulateKind(alg algorithm, kind collKind, p, n, elemSize, segBytes int, net *netModel) (float64, error) {
	return replay(buildAll(alg, kind, p, n, 0, elemSize, segBytes), elemSize, net, nil)
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
	return simulateKind(a, kindAllReduce, p, bytes/4, 4, DefaultSegmentBytes, uniformModel(alpha, beta))
}
