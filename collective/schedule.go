package collective

import "fmt"

// stepKind is what one schedule step does.
type stepKind uint8

const (
	stepSend       stepKind = iota // send elements [lo, hi) to peer
	stepRecv                       // receive elements [lo, hi) from peer straight into the buffer
	stepRecvReduce                 // receive [lo, hi) into a pooled temp and reduce it into the buffer
)

func (k stepKind) String() string {
	switch k {
	case stepSend:
		return "send"
	case stepRecv:
		return "recv"
	case stepRecvReduce:
		return "recv+reduce"
	}
	return "?"
}

// step is one message of a schedule. Ranges are in elements of the collective's buffer.
type step struct {
	kind stepKind
	// aux: a send that reads the second buffer (AllToAll's send buffer), which no step writes.
	aux bool
	// fence: a send that must wait for every earlier receive (barriers, zero-length messages).
	fence  bool
	peer   int
	lo, hi int
	// tag is the message's ordinal among the messages from sender to receiver in this schedule;
	// it travels in transport.Header.Segment.
	tag uint32
	// need is how many steps of the other list must be complete before this one starts: for a
	// send, receives (read after write); for a receive, sends (write after read).
	need int
}

func (s step) String() string {
	return fmt.Sprintf("%v peer=%d [%d,%d) tag=%d need=%d", s.kind, s.peer, s.lo, s.hi, s.tag, s.need)
}

// schedule is what one rank does in one collective: an ordered list of sends and an ordered list
// of receives, with the dependencies between the two. Algorithms build schedules as pure
// functions of (p, rank, n, segment size); the executor runs them, the checker verifies a set of
// them, and the simulator predicts their time.
type schedule struct {
	P, Rank, N int
	sends      []step
	recvs      []step
	// maxTemp is the largest stepRecvReduce in elements: the temp buffer the executor needs.
	maxTemp int
	// maxMsg is the largest message, sent or received, in elements.
	maxMsg int
	// err is the first step an Algorithm registered from outside asked for outside the call
	// (Builder.valid): such a schedule is never run or replayed.
	err error
}

// builder accumulates one rank's steps in program order.
type builder struct {
	p, rank, n int
	elemSize   int
	seg        int // largest message in elements (> 0)
	steps      []step
	err        error // the first invalid step (Builder.valid)
}

func newBuilder(p, rank, n, elemSize, segBytes int) *builder {
	seg := segBytes / elemSize
	if seg < 1 {
		seg = 1
	}
	return &builder{p: p, rank: rank, n: n, elemSize: elemSize, seg: seg}
}

// block is rank i's element range under Partition.
func (b *builder) block(i int) (int, int) { return Partition(b.n, b.p, i) }

func (b *builder) send(peer, lo, hi int) { b.add(step{kind: stepSend, peer: peer}, lo, hi) }
func (b *builder) sendAux(peer, lo, hi int) {
	b.add(step{kind: stepSend, aux: true, peer: peer}, lo, hi)
}
func (b *builder) recv(peer, lo, hi int)       { b.add(step{kind: stepRecv, peer: peer}, lo, hi) }
func (b *builder) recvReduce(peer, lo, hi int) { b.add(step{kind: stepRecvReduce, peer: peer}, lo, hi) }

// fenceSend sends an empty message after every earlier receive has completed.
func (b *builder) fenceSend(peer int) {
	b.steps = append(b.steps, step{kind: stepSend, fence: true, peer: peer})
}

// emptyRecv receives an empty message.
func (b *builder) emptyRecv(peer int) {
	b.steps = append(b.steps, step{kind: stepRecv, peer: peer})
}

// add appends [lo, hi) split into equal segments of at most b.seg elements. Both ends of a
// transfer split the same range the same way, so their messages match one for one. Empty
// ranges send nothing.
func (b *builder) add(s step, lo, hi int) {
	if hi <= lo || s.peer == b.rank {
		return
	}
	n := hi - lo
	k := (n + b.seg - 1) / b.seg
	for i := 0; i < k; i++ {
		a, z := Partition(n, k, i)
		s.lo, s.hi = lo+a, lo+z
		b.steps = append(b.steps, s)
	}
}

// finish computes tags and dependencies and splits the steps into the send and receive lists.
func (b *builder) finish() *schedule {
	s := &schedule{P: b.p, Rank: b.rank, N: b.n, err: b.err}
	sendTags := make([]uint32, b.p)
	recvTags := make([]uint32, b.p)
	// listIdx[i] is step i's index within its own list.
	listIdx := make([]int, len(b.steps))
	nSend, nRecv := 0, 0
	for i, st := range b.steps {
		s.maxMsg = max(s.maxMsg, st.hi-st.lo)
		if st.kind == stepSend {
			listIdx[i] = nSend
			nSend++
		} else {
			listIdx[i] = nRecv
			nRecv++
		}
	}
	s.sends = make([]step, 0, nSend)
	s.recvs = make([]step, 0, nRecv)
	for i, st := range b.steps {
		if st.kind == stepSend {
			st.tag = sendTags[st.peer]
			sendTags[st.peer]++
			// Wait for the latest earlier receive that wrote what this send reads.
			for j := i - 1; j >= 0; j-- {
				o := b.steps[j]
				if o.kind != stepSend && (st.fence || (!st.aux && overlaps(o, st))) {
					st.need = listIdx[j] + 1
					break
				}
			}
			s.sends = append(s.sends, st)
			continue
		}
		st.tag = recvTags[st.peer]
		recvTags[st.peer]++
		// Wait for the latest earlier send that reads what this receive overwrites.
		for j := i - 1; j >= 0; j-- {
			o := b.steps[j]
			if o.kind == stepSend && !o.aux && overlaps(o, st) {
				st.need = listIdx[j] + 1
				break
			}
		}
		if st.kind == stepRecvReduce {
			s.maxTemp = max(s.maxTemp, st.hi-st.lo)
		}
		s.recvs = append(s.recvs, st)
	}
	return s
}

func overlaps(a, b step) bool { return a.lo < b.hi && b.lo < a.hi }
