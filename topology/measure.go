package topology

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// MeasureOptions tune Measure. The zero value of each field selects its default.
type MeasureOptions struct {
	// SmallBytes is the latency probe's size (default 8 bytes).
	SmallBytes int
	// LargeBytes is the bandwidth probe's first size (default 256 KiB). Until the fastest of
	// LargeReps probes outlasts a round trip by MinLargeTime (default 20 ms), the link's β is
	// estimated from it and the probe sized to last MinLargeTime at that rate with a quarter
	// to spare, at least twice as large, up to MaxLargeBytes (default 8 MiB); when the probes
	// are too fast to estimate from, it grows fourfold. A shaped link lets a burst of its
	// traffic through at once (a token bucket of 10 ms of it in scripts/netns-topo.sh): a
	// probe not much longer than the burst reads the burst, not the rate, while a slow link
	// is not held up by megabytes.
	LargeBytes, MaxLargeBytes int
	MinLargeTime              time.Duration
	// SmallReps and LargeReps are the timed probes per size (defaults 7 and 3): α is half the
	// median round trip, β the fastest large transfer less the fastest round trip, per byte.
	// One untimed probe of each kind comes first.
	SmallReps, LargeReps int
}

func (o MeasureOptions) withDefaults() (MeasureOptions, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.SmallBytes, 8)
	def(&o.LargeBytes, 256<<10)
	def(&o.MaxLargeBytes, 8<<20)
	def(&o.SmallReps, 7)
	def(&o.LargeReps, 3)
	if o.MinLargeTime == 0 {
		o.MinLargeTime = 20 * time.Millisecond
	}
	switch {
	case o.SmallBytes < 1 || o.SmallReps < 1 || o.LargeReps < 1 || o.MinLargeTime < 0:
		return o, fmt.Errorf("topology: measure options %+v: sizes and repetitions must be positive", o)
	case o.LargeBytes <= o.SmallBytes || o.MaxLargeBytes < o.LargeBytes:
		return o, fmt.Errorf("topology: measure options: want SmallBytes %d < LargeBytes %d <= MaxLargeBytes %d",
			o.SmallBytes, o.LargeBytes, o.MaxLargeBytes)
	}
	return o, nil
}

// MeasureName is the name of Measure's mailbox service (service.Mailbox): its channel and the
// tag its frames carry, so that no service of the layer shares them by accident.
const MeasureName = "topology-measure"

// The operations of Measure's mailbox (service.Mailbox), named in its errors by measureOps.
const (
	opRow     uint8 = iota // a rank's proven same-host row, to rank 0
	opHosts                // rank 0's host indices, to every rank
	opEcho                 // probe: send the payload back
	opAck                  // probe: answer with one byte
	opDone                 // end of a rank's probes to this peer
	opReply                // answer to opEcho or opAck
	opResults              // a rank's measured links, to rank 0
	opMatrix               // the encoded matrix, to every rank
)

var measureOps = []string{"host row", "host indices", "echo probe", "ack probe", "end of probes", "probe reply", "measurements", "matrix"}

// Measure measures the links of the job: every rank of it must call Measure with the same
// options, and every rank returns the same matrix (rank 0 gathers the measurements, encodes
// the matrix and sends every rank those bytes, both along a tree of fan-out treeFanout, so
// that rank 0 talks to its children rather than to every rank).
//
// Hosts come from the endpoint's proof (transport.HostLocality): two ranks share a host when
// each proved it of the other. One rank pair measures each host pair, and the first two
// ranks of each host its local link; every rank pair on those hosts gets that measurement.
// The pairs run in parallel rounds (a round-robin tournament of the hosts, each host in at
// most one pair per round), each pair a ping-pong in each direction: small messages give the
// round trip (α is half its median), large ones with a one-byte answer give the time per
// byte of the direction (β = (fastest T_large − fastest round trip) / (large − small)).
//
// Measure runs on its mailbox's channel and leaves it empty. It honours ctx: a rank that
// never calls Measure makes the others fail when ctx ends, naming the peer they waited for.
func Measure(ctx context.Context, ep transport.Endpoint, opts MeasureOptions) (*Matrix, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mb, err := service.NewMailbox(ep, MeasureName, measureOps)
	if err != nil {
		return nil, err
	}
	m := &measurer{mb: mb, ep: ep, opts: opts, rank: ep.Rank(), p: ep.Size()}
	host, err := m.hosts(ctx)
	if err != nil {
		return nil, err
	}
	rounds := measureRounds(host)
	var led []measuredLink
	for _, round := range rounds {
		for _, pr := range round {
			if pr.A != m.rank && pr.B != m.rank {
				continue
			}
			l, err := m.pair(ctx, pr.A+pr.B-m.rank, pr.A == m.rank)
			if err != nil {
				return nil, err
			}
			led = append(led, l)
		}
	}
	return m.share(ctx, host, led, len(rounds))
}

type measurer struct {
	mb      *service.Mailbox
	ep      transport.Endpoint
	opts    MeasureOptions
	rank, p int
	buf     []byte // probes, sent and received; MaxLargeBytes once a pair needs it
	reply   []byte
}

// measuredLink is one direction measured by its sending rank.
type measuredLink struct {
	From, To int
	Link
}

func (m *measurer) send(ctx context.Context, to int, op uint8, seq uint64, body []byte) error {
	return m.mb.Send(ctx, to, service.Msg{Op: op, Arg: seq, Body: body})
}

// hosts gathers every rank's proven row at rank 0 (up the tree, gather), which groups the
// ranks into hosts and sends every rank the host indices (down the tree, spread).
func (m *measurer) hosts(ctx context.Context) ([]int, error) {
	row := transport.SameHost(m.ep)
	enc := make([]byte, m.p)
	for q, same := range row {
		if same {
			enc[q] = 1
		}
	}
	recs, err := m.gather(ctx, opRow, enc, uint64(m.p))
	if err != nil {
		return nil, err
	}
	var hostBytes []byte
	if m.rank == 0 {
		rows := make([][]bool, m.p)
		for r, rec := range recs {
			if len(rec) != m.p {
				return nil, fmt.Errorf("topology: rank 0: rank %d's %s has %d bytes, want %d (do the ranks agree on the job size?)",
					r, m.mb.OpName(opRow), len(rec), m.p)
			}
			rows[r] = make([]bool, m.p)
			for q, b := range rec {
				rows[r][q] = b == 1
			}
		}
		hostBytes = make([]byte, 4*m.p)
		for r, h := range groupHosts(rows) {
			binary.LittleEndian.PutUint32(hostBytes[4*r:], uint32(h))
		}
	}
	if hostBytes, err = m.spread(ctx, opHosts, hostBytes, uint64(4*m.p)); err != nil {
		return nil, err
	}
	if len(hostBytes) != 4*m.p {
		return nil, fmt.Errorf("topology: rank %d: the %s have %d bytes, want %d (do the ranks agree on the job size?)",
			m.rank, m.mb.OpName(opHosts), len(hostBytes), 4*m.p)
	}
	host := make([]int, m.p)
	for r := range host {
		host[r] = int(binary.LittleEndian.Uint32(hostBytes[4*r:]))
		if host[r] >= m.p {
			return nil, fmt.Errorf("topology: rank %d: rank 0 put rank %d on host %d of at most %d", m.rank, r, host[r], m.p)
		}
	}
	return host, nil
}

// treeFanout is the fan-out of the tree that gather and spread run on: rank r's parent is
// (r-1)/treeFanout, so a rank talks to at most treeFanout+1 ranks for them, and rank 0 to
// treeFanout instead of every rank.
const treeFanout = 8

// treeChildren are rank r's children in a job of p ranks: [lo, hi).
func treeChildren(r, p int) (lo, hi int) {
	lo = min(r*treeFanout+1, p)
	return lo, min(lo+treeFanout, p)
}

// gather collects at rank 0 one record per rank, mine from this one: each rank sends its
// parent its own record and its children's, as rank, length and bytes, each record at most
// limit bytes. Rank 0 returns the records indexed by rank; the others nil.
func (m *measurer) gather(ctx context.Context, op uint8, mine []byte, limit uint64) ([][]byte, error) {
	blob := binary.LittleEndian.AppendUint32(nil, uint32(m.rank))
	blob = binary.LittleEndian.AppendUint32(blob, uint32(len(mine)))
	blob = append(blob, mine...)
	lo, hi := treeChildren(m.rank, m.p)
	for c := lo; c < hi; c++ {
		b, err := m.mb.RecvLarge(ctx, c, op, uint64(m.p)*(8+limit))
		if err != nil {
			return nil, fmt.Errorf("topology: rank %d: waiting for the %s of rank %d and the ranks under it: %w", m.rank, m.mb.OpName(op), c, err)
		}
		blob = append(blob, b...)
	}
	if m.rank != 0 {
		parent := (m.rank - 1) / treeFanout
		if err := m.mb.SendLarge(ctx, parent, op, blob); err != nil {
			return nil, fmt.Errorf("topology: rank %d: sending the %s of its ranks to rank %d: %w", m.rank, m.mb.OpName(op), parent, err)
		}
		return nil, nil
	}
	recs := make([][]byte, m.p)
	for b := blob; len(b) > 0; {
		if len(b) < 8 {
			return nil, fmt.Errorf("topology: rank 0: the gathered %s end in a cut record", m.mb.OpName(op))
		}
		r, n := int(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[4:]))
		switch {
		case r < 0 || r >= m.p:
			return nil, fmt.Errorf("topology: rank 0: the gathered %s name rank %d of %d", m.mb.OpName(op), r, m.p)
		case recs[r] != nil:
			return nil, fmt.Errorf("topology: rank 0: the gathered %s hold rank %d twice", m.mb.OpName(op), r)
		case n > limit || n > uint64(len(b)-8):
			return nil, fmt.Errorf("topology: rank 0: rank %d's %s announce %d bytes", r, m.mb.OpName(op), n)
		}
		recs[r], b = b[8:8+n:8+n], b[8+n:]
	}
	for r, rec := range recs {
		if rec == nil {
			return nil, fmt.Errorf("topology: rank 0: no %s from rank %d", m.mb.OpName(op), r)
		}
	}
	return recs, nil
}

// spread sends data from rank 0 to every rank down the tree and returns it on every rank
// (data is rank 0's; the others receive at most limit bytes).
func (m *measurer) spread(ctx context.Context, op uint8, data []byte, limit uint64) ([]byte, error) {
	if m.rank != 0 {
		parent := (m.rank - 1) / treeFanout
		var err error
		if data, err = m.mb.RecvLarge(ctx, parent, op, limit); err != nil {
			return nil, fmt.Errorf("topology: rank %d: waiting for the %s from rank %d: %w", m.rank, m.mb.OpName(op), parent, err)
		}
	}
	lo, hi := treeChildren(m.rank, m.p)
	for c := lo; c < hi; c++ {
		if err := m.mb.SendLarge(ctx, c, op, data); err != nil {
			return nil, fmt.Errorf("topology: rank %d: sending the %s to rank %d: %w", m.rank, m.mb.OpName(op), c, err)
		}
	}
	return data, nil
}

// recvExactly receives the message op from rank `from` into buf, which it must fill.
func (m *measurer) recvExactly(ctx context.Context, from int, op uint8, buf []byte) error {
	msg, err := m.mb.Recv(ctx, from, op, buf)
	if err != nil {
		return fmt.Errorf("topology: rank %d: waiting for rank %d's %s: %w", m.rank, from, m.mb.OpName(op), err)
	}
	if len(msg.Body) != len(buf) {
		return fmt.Errorf("topology: rank %d: rank %d's %s has %d bytes, want %d (do the ranks agree on the job size?)",
			m.rank, from, m.mb.OpName(op), len(msg.Body), len(buf))
	}
	return nil
}

// pair measures both directions between this rank and peer: the lower rank probes first.
// It returns the direction this rank sends.
func (m *measurer) pair(ctx context.Context, peer int, first bool) (measuredLink, error) {
	if m.buf == nil {
		m.buf = make([]byte, m.opts.MaxLargeBytes)
		m.reply = make([]byte, m.opts.SmallBytes)
	}
	if !first {
		if err := m.follow(ctx, peer); err != nil {
			return measuredLink{}, err
		}
	}
	l, err := m.lead(ctx, peer)
	if err != nil {
		return measuredLink{}, fmt.Errorf("topology: rank %d: measuring the link to rank %d: %w", m.rank, peer, err)
	}
	if first {
		if err := m.follow(ctx, peer); err != nil {
			return measuredLink{}, err
		}
	}
	return measuredLink{From: m.rank, To: peer, Link: l}, nil
}

// lead times this rank's probes to peer.
func (m *measurer) lead(ctx context.Context, peer int) (Link, error) {
	var seq uint64
	probe := func(op uint8, n int) (time.Duration, error) {
		seq++
		start := time.Now()
		if err := m.send(ctx, peer, op, seq, m.buf[:n]); err != nil {
			return 0, err
		}
		r, err := m.mb.Recv(ctx, peer, opReply, m.reply)
		if err != nil {
			return 0, err
		}
		if r.Arg != seq {
			return 0, fmt.Errorf("the reply to probe %d answers probe %d", seq, r.Arg)
		}
		return time.Since(start), nil
	}
	// timed returns the sorted times of reps probes.
	timed := func(op uint8, n, reps int) ([]time.Duration, error) {
		ts := make([]time.Duration, reps)
		for i := range ts {
			t, err := probe(op, n)
			if err != nil {
				return nil, err
			}
			ts[i] = t
		}
		slices.Sort(ts)
		return ts, nil
	}
	small := m.opts.SmallBytes
	if _, err := probe(opEcho, small); err != nil {
		return Link{}, err
	}
	rtts, err := timed(opEcho, small, m.opts.SmallReps)
	if err != nil {
		return Link{}, err
	}
	// The latency is what every message pays: the median round trip. The bandwidth is a
	// capacity: the fastest large transfer, less the fastest round trip, shows it best, since
	// a busy host only ever adds time (on a shaped link the tokens saved while idle are
	// bounded by its burst).
	rtt, fastest := rtts[len(rtts)/2], rtts[0]
	// The probe grows until the fastest of LargeReps probes lasts MinLargeTime: one probe
	// that a busy host slowed down does not stop the growth, and one that a token bucket's
	// burst sped up makes the next size larger.
	large := m.opts.LargeBytes
	var t time.Duration
	// An untimed probe first drains what a token bucket saved while the link was idle; each
	// size's probes then follow the last size's with no pause.
	if _, err := probe(opAck, large); err != nil {
		return Link{}, err
	}
	for {
		ts, err := timed(opAck, large, m.opts.LargeReps)
		if err != nil {
			return Link{}, err
		}
		t = ts[0]
		if t-fastest >= m.opts.MinLargeTime || large >= m.opts.MaxLargeBytes {
			break
		}
		beta := math.Inf(1)
		if d := t - fastest; d > 0 {
			beta = d.Seconds() / float64(large)
		}
		large = probeSize(large, beta, m.opts)
	}
	if err := m.send(ctx, peer, opDone, seq+1, nil); err != nil {
		return Link{}, err
	}
	beta := (t - fastest).Seconds() / float64(large-small)
	if beta <= 0 {
		// The large probe was no slower than a round trip (a link faster than the clock can
		// tell): bound β by the whole transfer instead of reporting a free link.
		beta = t.Seconds() / float64(large)
	}
	return Link{Alpha: rtt.Seconds() / 2, Beta: beta}, nil
}

// probeSize is the next bandwidth probe's size after probes of n bytes showed a rate of beta
// seconds per byte: enough for MinLargeTime at that rate with a
// quarter to spare, at least twice n, fourfold when no probe has shown a rate yet (beta
// infinite), and at most MaxLargeBytes.
func probeSize(n int, beta float64, o MeasureOptions) int {
	next := 4 * n
	if !math.IsInf(beta, 1) {
		next = max(2*n, int(math.Min(1.25*o.MinLargeTime.Seconds()/beta, float64(o.MaxLargeBytes))))
	}
	return min(next, o.MaxLargeBytes)
}

// follow answers peer's probes until it is done.
func (m *measurer) follow(ctx context.Context, peer int) error {
	for {
		msg, err := m.mb.RecvAny(ctx, peer, m.buf)
		if err != nil {
			return fmt.Errorf("topology: rank %d: answering rank %d's probes: %w", m.rank, peer, err)
		}
		var answer []byte
		switch msg.Op {
		case opEcho:
			answer = msg.Body
		case opAck:
			answer = m.buf[:1]
		case opDone:
			return nil
		default:
			return fmt.Errorf("topology: rank %d: rank %d sent its %s while probing the link (do both ranks run Measure?)", m.rank, peer, m.mb.OpName(msg.Op))
		}
		if err := m.send(ctx, peer, opReply, msg.Arg, answer); err != nil {
			return fmt.Errorf("topology: rank %d: answering rank %d's probe: %w", m.rank, peer, err)
		}
	}
}

const linkRecordLen = 4 + 4 + 8 + 8

// share gathers every rank's measured links at rank 0, which builds the matrix and sends every
// rank its encoding; every rank (rank 0 too) returns the decoded bytes.
func (m *measurer) share(ctx context.Context, host []int, led []measuredLink, rounds int) (*Matrix, error) {
	b := make([]byte, 0, linkRecordLen*len(led))
	for _, l := range led {
		b = binary.LittleEndian.AppendUint32(b, uint32(l.From))
		b = binary.LittleEndian.AppendUint32(b, uint32(l.To))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.Alpha))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.Beta))
	}
	recs, err := m.gather(ctx, opResults, b, uint64(linkRecordLen*(rounds+1)))
	if err != nil {
		return nil, err
	}
	var enc []byte
	if m.rank == 0 {
		measured := make(map[[2]int]Link)
		for r, rec := range recs {
			if len(rec)%linkRecordLen != 0 {
				return nil, fmt.Errorf("topology: rank 0: rank %d's measurements have %d bytes, not a multiple of %d", r, len(rec), linkRecordLen)
			}
			for b := rec; len(b) > 0; b = b[linkRecordLen:] {
				from, to := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
				if from != r || to < 0 || to >= m.p {
					return nil, fmt.Errorf("topology: rank 0: rank %d reports the link from rank %d to rank %d", r, from, to)
				}
				measured[[2]int{from, to}] = Link{Alpha: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
					Beta: math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))}
			}
		}
		mat, err := expand(host, measured)
		if err != nil {
			return nil, err
		}
		if enc, err = mat.Marshal(); err != nil {
			return nil, fmt.Errorf("topology: rank 0: encoding the matrix: %w", err)
		}
	}
	if enc, err = m.spread(ctx, opMatrix, enc, maxMatrixBytes(m.p)); err != nil {
		return nil, err
	}
	return m.decode(enc)
}

// maxMatrixBytes bounds the encoded matrix of p ranks that a rank accepts from rank 0: twice
// what JSON takes for p² links of two float64s (about 60 bytes each) and p host numbers, so
// that a corrupt length cannot make a rank allocate without bound.
func maxMatrixBytes(p int) uint64 { return uint64(p)*uint64(p)*128 + uint64(p)*32 + 1<<16 }

func (m *measurer) decode(enc []byte) (*Matrix, error) {
	mat, err := Unmarshal(enc)
	if err != nil {
		return nil, fmt.Errorf("rank %d: the measured matrix: %w", m.rank, err)
	}
	if mat.P != m.p {
		return nil, fmt.Errorf("topology: rank %d: the measured matrix has %d ranks, the job %d", m.rank, mat.P, m.p)
	}
	return mat, nil
}

// expand gives every rank pair the measurement of its hosts' representatives: the first two
// ranks of a host for a pair on it (in the pair's direction), the lowest rank of each host for
// a pair across two.
func expand(host []int, measured map[[2]int]Link) (*Matrix, error) {
	p := len(host)
	mat := &Matrix{P: p, Host: host, Links: make([][]Link, p)}
	ranksOf := mat.RanksOf()
	for r := range p {
		mat.Links[r] = make([]Link, p)
		for q := range p {
			if q == r {
				continue
			}
			hr, hq := host[r], host[q]
			key := [2]int{ranksOf[hr][0], ranksOf[hq][0]}
			if hr == hq {
				key = [2]int{ranksOf[hr][0], ranksOf[hr][1]}
				if r > q {
					key = [2]int{key[1], key[0]}
				}
			}
			l, ok := measured[key]
			if !ok {
				return nil, fmt.Errorf("topology: rank 0: no measurement of the link from rank %d to rank %d (for ranks %d to %d)", key[0], key[1], r, q)
			}
			mat.Links[r][q] = l
		}
	}
	return mat, mat.Validate()
}
