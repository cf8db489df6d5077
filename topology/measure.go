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

// MeasureName is the name under which Measure takes its channel from the service layer
// (service.ChannelOf), so that no service of the layer shares it by accident.
const MeasureName = "topology-measure"

// Message kinds on Measure's channel (the Op of the header).
const (
	opRow       uint32 = 0x746f7001 + iota // a rank's proven same-host row, to rank 0
	opHosts                                // rank 0's host indices, to every rank
	opEcho                                 // probe: send the payload back
	opAck                                  // probe: answer with one byte
	opDone                                 // end of a rank's probes to this peer
	opReply                                // answer to opEcho or opAck
	opResults                              // a rank's measured links, to rank 0
	opMatrixLen                            // the encoded matrix's length, to every rank
	opMatrix                               // the encoded matrix, to every rank
)

// Measure measures the links of the job: every rank of it must call Measure with the same
// options, and every rank returns the same matrix (rank 0 gathers the measurements, encodes
// the matrix and sends every rank those bytes).
//
// Hosts come from the endpoint's proof (transport.HostLocality): two ranks share a host when
// each proved it of the other. One rank pair measures each host pair, and the first two
// ranks of each host its local link; every rank pair on those hosts gets that measurement.
// The pairs run in parallel rounds (a round-robin tournament of the hosts, each host in at
// most one pair per round), each pair a ping-pong in each direction: small messages give the
// round trip (α is half its median), large ones with a one-byte answer give the time per
// byte of the direction (β = (fastest T_large − fastest round trip) / (large − small)).
//
// Measure runs on the channel of MeasureName and leaves it empty. It honours ctx: a rank that
// never calls Measure makes the others fail when ctx ends, naming the peer they waited for.
func Measure(ctx context.Context, ep transport.Endpoint, opts MeasureOptions) (*Matrix, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &measurer{ep: ep, ch: service.ChannelOf(MeasureName), opts: opts, rank: ep.Rank(), p: ep.Size()}
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
	ep      transport.Endpoint
	ch      transport.Channel
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

func (m *measurer) header(op uint32, seq uint64) transport.Header {
	return transport.Header{Channel: m.ch, Op: op, Seq: seq}
}

// hosts gathers every rank's proven row at rank 0, which groups the ranks into hosts and
// sends every rank the host indices.
func (m *measurer) hosts(ctx context.Context) ([]int, error) {
	row := transport.SameHost(m.ep)
	enc := make([]byte, m.p)
	for q, same := range row {
		if same {
			enc[q] = 1
		}
	}
	hostBytes := make([]byte, 4*m.p)
	if m.rank != 0 {
		if err := m.ep.Send(ctx, 0, m.header(opRow, 0), enc); err != nil {
			return nil, fmt.Errorf("topology: rank %d: sending its host row to rank 0: %w", m.rank, err)
		}
		if err := m.recvExactly(ctx, 0, opHosts, hostBytes); err != nil {
			return nil, err
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
	rows := make([][]bool, m.p)
	rows[0] = row
	for r := 1; r < m.p; r++ {
		if err := m.recvExactly(ctx, r, opRow, enc); err != nil {
			return nil, err
		}
		rows[r] = make([]bool, m.p)
		for q, b := range enc {
			rows[r][q] = b == 1
		}
	}
	host := groupHosts(rows)
	for r, h := range host {
		binary.LittleEndian.PutUint32(hostBytes[4*r:], uint32(h))
	}
	for r := 1; r < m.p; r++ {
		if err := m.ep.Send(ctx, r, m.header(opHosts, 0), hostBytes); err != nil {
			return nil, fmt.Errorf("topology: rank 0: sending the hosts to rank %d: %w", r, err)
		}
	}
	return host, nil
}

// recvExactly receives the message op from rank `from` into buf, which it must fill.
func (m *measurer) recvExactly(ctx context.Context, from int, op uint32, buf []byte) error {
	n, err := m.ep.Recv(ctx, from, m.header(op, 0), buf)
	if err != nil {
		return fmt.Errorf("topology: rank %d: waiting for rank %d's %s: %w", m.rank, from, opName(op), err)
	}
	if n != len(buf) {
		return fmt.Errorf("topology: rank %d: rank %d's %s has %d bytes, want %d (do the ranks agree on the job size?)",
			m.rank, from, opName(op), n, len(buf))
	}
	return nil
}

func opName(op uint32) string {
	switch op {
	case opRow:
		return "host row"
	case opHosts:
		return "host indices"
	case opResults:
		return "measurements"
	case opMatrixLen:
		return "matrix length"
	case opMatrix:
		return "matrix"
	}
	return fmt.Sprintf("message %#x", op)
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
	probe := func(op uint32, n int) (time.Duration, error) {
		seq++
		start := time.Now()
		if err := m.ep.Send(ctx, peer, m.header(op, seq), m.buf[:n]); err != nil {
			return 0, err
		}
		if _, err := m.ep.Recv(ctx, peer, m.header(opReply, seq), m.reply); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	// timed returns the sorted times of reps probes.
	timed := func(op uint32, n, reps int) ([]time.Duration, error) {
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
	if err := m.ep.Send(ctx, peer, m.header(opDone, seq+1), nil); err != nil {
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
		h, n, err := m.ep.RecvAny(ctx, peer, m.ch, m.buf)
		if err != nil {
			return fmt.Errorf("topology: rank %d: answering rank %d's probes: %w", m.rank, peer, err)
		}
		var answer []byte
		switch h.Op {
		case opEcho:
			answer = m.buf[:n]
		case opAck:
			answer = m.buf[:1]
		case opDone:
			return nil
		default:
			return fmt.Errorf("topology: rank %d: rank %d sent %v while probing the link (do both ranks run Measure?)", m.rank, peer, h)
		}
		if err := m.ep.Send(ctx, peer, m.header(opReply, h.Seq), answer); err != nil {
			return fmt.Errorf("topology: rank %d: answering rank %d's probe: %w", m.rank, peer, err)
		}
	}
}

const linkRecordLen = 4 + 4 + 8 + 8

// share gathers every rank's measured links at rank 0, which builds the matrix and sends every
// rank its encoding; every rank (rank 0 too) returns the decoded bytes.
func (m *measurer) share(ctx context.Context, host []int, led []measuredLink, rounds int) (*Matrix, error) {
	if m.rank != 0 {
		b := make([]byte, 0, linkRecordLen*len(led))
		for _, l := range led {
			b = binary.LittleEndian.AppendUint32(b, uint32(l.From))
			b = binary.LittleEndian.AppendUint32(b, uint32(l.To))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.Alpha))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.Beta))
		}
		if err := m.ep.Send(ctx, 0, m.header(opResults, 0), b); err != nil {
			return nil, fmt.Errorf("topology: rank %d: sending its measurements to rank 0: %w", m.rank, err)
		}
		var n [8]byte
		if err := m.recvExactly(ctx, 0, opMatrixLen, n[:]); err != nil {
			return nil, err
		}
		size := binary.LittleEndian.Uint64(n[:])
		if size > 1<<34 {
			return nil, fmt.Errorf("topology: rank %d: rank 0 announces a matrix of %d bytes", m.rank, size)
		}
		enc := make([]byte, size)
		if err := m.recvExactly(ctx, 0, opMatrix, enc); err != nil {
			return nil, err
		}
		return m.decode(enc)
	}
	measured := make(map[[2]int]Link)
	for _, l := range led {
		measured[[2]int{l.From, l.To}] = l.Link
	}
	buf := make([]byte, linkRecordLen*(rounds+1))
	for r := 1; r < m.p; r++ {
		n, err := m.ep.Recv(ctx, r, m.header(opResults, 0), buf)
		if err != nil {
			return nil, fmt.Errorf("topology: rank 0: waiting for rank %d's measurements: %w", r, err)
		}
		if n%linkRecordLen != 0 {
			return nil, fmt.Errorf("topology: rank 0: rank %d's measurements have %d bytes, not a multiple of %d", r, n, linkRecordLen)
		}
		for b := buf[:n]; len(b) > 0; b = b[linkRecordLen:] {
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
	enc, err := mat.Marshal()
	if err != nil {
		return nil, fmt.Errorf("topology: rank 0: encoding the matrix: %w", err)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(enc)))
	for r := 1; r < m.p; r++ {
		if err := m.ep.Send(ctx, r, m.header(opMatrixLen, 0), n[:]); err != nil {
			return nil, fmt.Errorf("topology: rank 0: sending the matrix to rank %d: %w", r, err)
		}
		if err := m.ep.Send(ctx, r, m.header(opMatrix, 0), enc); err != nil {
			return nil, fmt.Errorf("topology: rank 0: sending the matrix to rank %d: %w", r, err)
		}
	}
	return m.decode(enc)
}

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
