package collective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/topology"
)

// Link speeds of the test networks: shared memory inside a host, access links inside a rack,
// a rack's uplink ten times slower.
const (
	testAlpha     = 50e-6
	testBetaLocal = 1 / 4e9
	testBetaHost  = 1 / 25e6
	testBetaRack  = 1 / 2.5e6
)

// rackMatrix is a matrix of len(host) ranks: rank r on host host[r], host h in rack rack[h].
// slow marks hosts whose own links are as slow as an uplink.
func rackMatrix(host, rack []int, slow map[int]bool) *topology.Matrix {
	p := len(host)
	m := topology.Uniform(p, testAlpha, testBetaHost)
	copy(m.Host, host)
	for r := range p {
		for q := range p {
			l := &m.Links[r][q]
			switch {
			case host[r] == host[q]:
				l.Beta = testBetaLocal
			case rack[host[r]] != rack[host[q]] || slow[host[r]] || slow[host[q]]:
				l.Beta = testBetaRack
			}
		}
	}
	return m
}

// placements are ranks dealt to hosts: block (0,0,1,1,...), cyclic (0,1,2,...,0,1,...), and
// uneven (hosts of 3, 1, 2, 3, 1, 2, ... ranks), for p ranks on at most h hosts.
func placements(p, h int, rng *rand.Rand) map[string][]int {
	out := map[string][]int{"block": make([]int, p), "cyclic": make([]int, p), "uneven": make([]int, p), "random": make([]int, p)}
	per := (p + h - 1) / h
	for r := range p {
		out["block"][r] = r / per
		out["cyclic"][r] = r % min(h, p)
	}
	host, left := 0, 3
	for r := range p {
		out["uneven"][r] = host
		if left--; left == 0 {
			host++
			left = []int{3, 1, 2}[host%3]
		}
	}
	perm := rng.Perm(p)
	for r := range p {
		out["random"][r] = out["cyclic"][perm[r]]
	}
	for name, hs := range out {
		out[name] = denseHosts(hs)
	}
	return out
}

// denseHosts renumbers host indices in order of first use, as a matrix requires.
func denseHosts(hs []int) []int {
	ids := map[int]int{}
	out := make([]int, len(hs))
	for r, h := range hs {
		if _, ok := ids[h]; !ok {
			ids[h] = len(ids)
		}
		out[r] = ids[h]
	}
	return out
}

// twoRacks puts the first half of the hosts in rack 0, the rest in rack 1.
func twoRacks(host []int) []int {
	nh := 0
	for _, h := range host {
		nh = max(nh, h+1)
	}
	rack := make([]int, nh)
	for h := range rack {
		rack[h] = h * 2 / nh
	}
	return rack
}

// TestTopologySchedulesAreConsistent checks every configuration a matrix makes available, for
// all three collectives, at p = 1..12 over placements with hosts of different rank counts.
func TestTopologySchedulesAreConsistent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []collKind{kindAllReduce, kindReduceScatter, kindAllGather}
	names := append(Configurations(), "auto", "ring")
	for p := 1; p <= 12; p++ {
		for pname, host := range placements(p, 4, rng) {
			m := rackMatrix(host, twoRacks(host), nil)
			for _, name := range names {
				alg, err := lookupAlgorithm(name, Options{Links: m})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, n := range []int{0, 1, p - 1, p + 1, 2*p + 3, 97} {
					for _, seg := range []int{8, DefaultSegmentBytes} {
						for _, kind := range kinds {
							if err := checkSchedules(alg, kind, p, max(n, 0), 0, seg); err != nil {
								t.Fatalf("%s %v p=%d %s hosts %v n=%d seg=%d: %v", name, kind, p, pname, host, n, seg, err)
							}
						}
					}
				}
			}
		}
	}
}

func TestLayout(t *testing.T) {
	tests := []struct {
		name        string
		host, rack  []int
		slow        map[int]bool
		groups      [][]int
		grouped     []int
		interleaved []int
	}{
		{"racks cyclic", []int{0, 1, 2, 3, 0, 1, 2, 3}, []int{0, 0, 1, 1}, nil,
			[][]int{{0, 1}, {2, 3}}, []int{0, 4, 1, 5, 2, 6, 3, 7}, []int{0, 2, 4, 6, 1, 3, 5, 7}},
		{"racks block", []int{0, 0, 1, 1, 2, 2, 3, 3}, []int{0, 0, 1, 1}, nil,
			[][]int{{0, 1}, {2, 3}}, []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{0, 4, 1, 5, 2, 6, 3, 7}},
		{"slow host", []int{0, 1, 2, 0, 1, 2}, []int{0, 0, 0}, map[int]bool{1: true},
			[][]int{{0, 2}, {1}}, []int{0, 3, 2, 5, 1, 4}, []int{0, 1, 3, 4, 2, 5}},
		{"one host", []int{0, 0, 0}, []int{0}, nil, [][]int{{0}}, []int{0, 1, 2}, []int{0, 1, 2}},
		{"uneven uniform", []int{0, 0, 0, 1, 2, 2}, []int{0, 0, 0}, nil,
			[][]int{{0, 1, 2}}, []int{0, 1, 2, 3, 4, 5}, []int{0, 1, 2, 3, 4, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(rackMatrix(tc.host, tc.rack, tc.slow))
			if got := fmt.Sprint(l.groups); got != fmt.Sprint(tc.groups) {
				t.Errorf("groups %s, want %v", got, tc.groups)
			}
			if got := l.rankOrder(orderGrouped); fmt.Sprint(got) != fmt.Sprint(tc.grouped) {
				t.Errorf("grouped order %v, want %v", got, tc.grouped)
			}
			if got := l.rankOrder(orderInterleaved); fmt.Sprint(got) != fmt.Sprint(tc.interleaved) {
				t.Errorf("interleaved order %v, want %v", got, tc.interleaved)
			}
		})
	}
}

// TestRingOrderCrossesThinLinksTwice: for any placement on two racks, the grouped ring crosses
// between the racks exactly twice (once each way round), and a host's ranks are adjacent.
func TestRingOrderCrossesThinLinksTwice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for p := 4; p <= 12; p++ {
		for pname, host := range placements(p, 4, rng) {
			rack := twoRacks(host)
			l := newLayout(rackMatrix(host, rack, nil))
			order := l.rankOrder(orderGrouped)
			crossings, hostChanges := 0, 0
			for i, r := range order {
				q := order[(i+1)%p]
				if rack[host[r]] != rack[host[q]] {
					crossings++
				}
				if host[r] != host[q] {
					hostChanges++
				}
			}
			nh := len(l.hosts)
			if crossings != 2 || hostChanges != nh {
				t.Errorf("p=%d %s hosts %v: ring %v crosses racks %d times and changes host %d times, want 2 and %d",
					p, pname, host, order, crossings, hostChanges, nh)
			}
		}
	}
}

func TestPlaceServers(t *testing.T) {
	// Host 1 is behind a slow link: its server comes last and carries the smallest shard.
	l := newLayout(rackMatrix([]int{0, 1, 2, 0, 1, 2}, []int{0, 0, 0}, map[int]bool{1: true}))
	place, weight := placeServers(l, 6)
	if fmt.Sprint(place) != "[0 2 1 3 5 4]" {
		t.Errorf("servers %v, want one rank of each host (fast hosts first) before a second", place)
	}
	if weight[2] >= weight[0] || weight[0] != weight[1] {
		t.Errorf("shares %v: the slow host's server should carry less, the fast ones equal", weight)
	}
	place, _ = placeServers(l, 2)
	if fmt.Sprint(place) != "[0 2]" {
		t.Errorf("2 servers on %v, want the fast hosts 0 and 2's first ranks", place)
	}
	for n := range 20 {
		end := 0
		for s := range weight {
			lo, hi := weightedPartition(n, weight, s)
			if lo != end || hi < lo {
				t.Fatalf("n=%d shard %d = [%d, %d), want it to start at %d", n, s, lo, hi, end)
			}
			end = hi
		}
		if end != n {
			t.Fatalf("n=%d: shards end at %d", n, end)
		}
	}
}

// TestAutoWithLinks: on two racks joined by a thin uplink, whatever the placement, auto's
// choice is predicted within 1.3× of the uplink bound for large buffers (each direction of
// the uplink carries the buffer once), and beats the rank-order ring it would run without a
// matrix by at least 1.4× where that ring crosses the uplinks more than twice; every rank
// reaches the same choice.
func TestAutoWithLinks(t *testing.T) {
	const bytes = 64 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range []int{6, 8, 9} {
		for pname, host := range placements(p, 4, rng) {
			m := rackMatrix(host, twoRacks(host), nil)
			bound := bytes * testBetaRack
			var first Choice
			for r := range p {
				a := newAuto(Options{Links: m})
				ch := a.decide(kindAllReduce, newBuilder(p, r, bytes/4, 4, DefaultSegmentBytes))
				got := Choice{Algorithm: ch.name, Predicted: seconds(ch.predicted)}
				if r == 0 {
					first = got
				} else if got != first {
					t.Fatalf("p=%d %s: rank %d chose %+v, rank 0 %+v", p, pname, r, got, first)
				}
			}
			ringT, err := simulateKind(ring{}, kindAllReduce, p, bytes/4, 4, DefaultSegmentBytes, newLayout(m).model())
			if err != nil {
				t.Fatal(err)
			}
			pred := first.Predicted.Seconds()
			t.Logf("p=%d %-6s hosts %v: auto %s %.2fs, bound %.2fs, rank-order ring %.2fs", p, pname, host, first.Algorithm, pred, bound, ringT)
			if pred > 1.3*bound || pred < bound*0.99 {
				t.Errorf("p=%d %s: auto's %s predicted %.2fs, want within [1, 1.3]× the uplink bound %.2fs", p, pname, first.Algorithm, pred, bound)
			}
			rack, crossings := twoRacks(host), 0
			for r := range p {
				if rack[host[r]] != rack[host[(r+1)%p]] {
					crossings++
				}
			}
			if crossings > 2 && ringT < 1.4*pred {
				t.Errorf("p=%d %s: rank-order ring %.2fs is not 1.4× auto's %.2fs", p, pname, ringT, pred)
			}
		}
	}
}

func TestLinksOptions(t *testing.T) {
	m := rackMatrix([]int{0, 0, 1}, []int{0, 0}, nil)
	tests := []struct {
		opts Options
		p    int
		want string
	}{
		{Options{Algorithm: "hier-ring"}, 3, "Options.Links"},
		{Options{Algorithm: "ring/grouped"}, 3, "Options.Links"},
		{Options{Algorithm: "ring/sideways", Links: m}, 3, "unknown order"},
		{Options{Algorithm: "hier-auto", Links: m}, 3, "auto chooses"},
		{Options{Algorithm: "hier-nope", Links: m}, 3, "unknown algorithm"},
		{Options{Algorithm: "ring", Links: m}, 4, "matrix of 3 ranks for a job of 4"},
		{Options{Algorithm: "ring", Links: &topology.Matrix{P: 3}}, 3, "Links"},
	}
	for _, tc := range tests {
		err := tc.opts.Validate(tc.p)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one containing %q", tc.opts.Algorithm, err, tc.want)
		}
	}
	for _, name := range append(Configurations(), "ring/rank", "auto") {
		if err := (Options{Algorithm: name, Links: m}).Validate(3); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !math.IsInf(newLayout(topology.Uniform(1, 0, 0)).model().beta(0, 0), 0) && len(newLayout(topology.Uniform(1, 0, 0)).groups) != 1 {
		t.Error("a one-rank matrix should make one group")
	}
}

// TestTopologyCollectivesMem runs every collective through the executor with a selection of
// the matrix's configurations on uneven placements and checks the results against the
// reference (bit-identical on every rank for allreduce).
func TestTopologyCollectivesMem(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"auto", "ring", "ps", "hier-ring/grouped", "hier-butterfly/interleaved",
		"hier-binary-blocks/grouped", "hier-ps/interleaved", "butterfly/interleaved", "binary-blocks/grouped"}
	for _, p := range []int{1, 2, 3, 5, 7, 9} {
		pl := placements(p, 3, rng)
		for _, pname := range []string{"uneven", "random"} {
			host := pl[pname]
			for _, name := range names {
				t.Run(fmt.Sprintf("%s/p=%d/%s", name, p, pname), func(t *testing.T) {
					t.Parallel()
					m := rackMatrix(host, twoRacks(host), nil)
					exercise(t, newMemJob(t, p, Options{Algorithm: name, SegmentBytes: 256, Links: m}), name)
				})
			}
		}
	}
}

// TestSplitKeepsTheLinks: a sub-communicator plans from its members' part of the matrix (in
// their new order), so the matrix's configurations run on it too.
func TestSplitKeepsTheLinks(t *testing.T) {
	for _, p := range []int{5, 8} {
		host := make([]int, p)
		for r := range host {
			host[r] = r % 3
		}
		m := rackMatrix(host, twoRacks(host), nil)
		for _, alg := range []string{"auto", "hier-ring/grouped"} {
			t.Run(fmt.Sprintf("%s/p=%d", alg, p), func(t *testing.T) {
				exerciseColors(t, newMemJob(t, p, Options{Algorithm: alg, SegmentBytes: 256, Links: m}), alg,
					func(t *testing.T, j *job, alg string) {
						sub, found := j.comms[0].Links(), false
						for _, ms := range wantMembers(p) {
							same := sub != nil && sub.P == len(ms)
							for i := 0; same && i < len(ms); i++ {
								for k := range ms {
									same = same && sub.Links[i][k] == m.Links[ms[i]][ms[k]]
								}
							}
							found = found || same
						}
						if !found {
							t.Fatalf("sub-communicator of %d ranks has links %+v, not its members' part of the matrix", j.comms[0].Size(), sub)
						}
						exercise(t, j, alg)
					})
			})
		}
	}
}

// sendsTo is an algorithm in which every rank r with a target sends n elements to it.
type sendsTo map[int]int

func (s sendsTo) allReduce(b *builder) {
	if to, ok := s[b.rank]; ok {
		b.send(to, 0, b.n)
	}
	for from, to := range s {
		if to == b.rank {
			b.recv(from, 0, b.n)
		}
	}
}
func (s sendsTo) reduceScatter(b *builder) { s.allReduce(b) }
func (s sendsTo) allGather(b *builder)     { s.allReduce(b) }

// TestModelSharesLinks: two flows between the same two hosts share the hosts' NICs and take
// twice as long as one; two flows across racks share the uplink.
func TestModelSharesLinks(t *testing.T) {
	const n = 1 << 20 // elements of 4 bytes
	tests := []struct {
		name       string
		host, rack []int
		flows      sendsTo
		beta       float64 // the bottleneck's β
		flowsThere int     // flows through it
	}{
		{"one flow between hosts", []int{0, 0, 1, 1}, []int{0, 0}, sendsTo{0: 2}, testBetaHost, 1},
		{"two flows share a host NIC", []int{0, 0, 1, 1}, []int{0, 0}, sendsTo{0: 2, 1: 3}, testBetaHost, 2},
		{"two hosts share an uplink", []int{0, 1, 2, 3}, []int{0, 0, 1, 1}, sendsTo{0: 2, 1: 3}, testBetaRack, 2},
		{"flows inside racks do not", []int{0, 1, 2, 3}, []int{0, 0, 1, 1}, sendsTo{0: 1, 2: 3}, testBetaHost, 1},
	}
	for _, tc := range tests {
		m := rackMatrix(tc.host, tc.rack, nil)
		got, err := simulateKind(tc.flows, kindAllReduce, len(tc.host), n, 4, DefaultSegmentBytes, newLayout(m).model())
		if err != nil {
			t.Fatal(err)
		}
		want := float64(tc.flowsThere) * 4 * n * tc.beta
		if got < want || got > want*1.05 {
			t.Errorf("%s: %.3fs, want %.3fs", tc.name, got, want)
		}
	}
}

// TestGroupsByTheLargestJump groups hosts on networks of one, two and three tiers, with every
// link's cost per byte off by up to ±noise (a measurement's error, the same in both
// directions or not): the groups are those of the largest step between tiers, whatever the
// noise inside a tier, and one group when there is no step of more than minGroupJump.
func TestGroupsByTheLargestJump(t *testing.T) {
	tiers := func(tier ...[]int) func(h, g int) int {
		// tier[k][h] is host h's group at level k; two hosts' link is in the first level
		// where they share a group (0: the fastest), or len(tier) when they share none.
		return func(h, g int) int {
			for k, of := range tier {
				if of[h] == of[g] {
					return k
				}
			}
			return len(tier)
		}
	}
	tests := []struct {
		name   string
		hosts  int
		level  func(h, g int) int
		cost   []float64 // cost per byte of each level
		noise  float64
		groups [][]int
	}{
		{"one tier", 5, tiers(), []float64{1e-8}, 0, [][]int{{0, 1, 2, 3, 4}}},
		{"one tier, noisy", 6, tiers(), []float64{1e-8}, 0.3, [][]int{{0, 1, 2, 3, 4, 5}}},
		{"two hosts", 2, tiers(), []float64{1e-8}, 0.3, [][]int{{0, 1}}},
		{"two racks", 4, tiers([]int{0, 0, 1, 1}), []float64{1e-8, 1e-7}, 0, [][]int{{0, 1}, {2, 3}}},
		{"two racks, noise of 2.3x inside", 6, tiers([]int{0, 1, 0, 1, 0, 1}), []float64{1e-8, 1e-7}, 0.4,
			[][]int{{0, 2, 4}, {1, 3, 5}}},
		{"three racks of 1, 2, 3 hosts", 6, tiers([]int{0, 1, 1, 2, 2, 2}), []float64{1e-8, 4e-8}, 0.2,
			[][]int{{0}, {1, 2}, {3, 4, 5}}},
		{"slow host", 5, func(h, g int) int {
			if h == 3 || g == 3 {
				return 1
			}
			return 0
		}, []float64{1e-8, 1e-7}, 0.2, [][]int{{0, 1, 2, 4}, {3}}},
		{"three tiers, the rack step larger", 8, tiers([]int{0, 0, 1, 1, 2, 2, 3, 3}, []int{0, 0, 0, 0, 1, 1, 1, 1}),
			[]float64{1e-9, 2e-8, 8e-8}, 0.2, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
		{"three tiers, the site step larger", 8, tiers([]int{0, 0, 1, 1, 2, 2, 3, 3}, []int{0, 0, 0, 0, 1, 1, 1, 1}),
			[]float64{1e-9, 3e-9, 1e-7}, 0.2, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for try := range 20 {
				m := topology.Uniform(tc.hosts, testAlpha, 0)
				for h := range tc.hosts {
					for g := range tc.hosts {
						if h != g {
							m.Links[h][g].Beta = tc.cost[tc.level(h, g)] * (1 + tc.noise*(2*rng.Float64()-1))
						}
					}
				}
				l := newLayout(m)
				got := make([][]int, len(l.groups))
				for i, g := range l.groups {
					got[i] = append([]int(nil), g...)
					slices.Sort(got[i])
				}
				slices.SortFunc(got, func(a, b []int) int { return a[0] - b[0] })
				if fmt.Sprint(got) != fmt.Sprint(tc.groups) {
					t.Fatalf("try %d: groups %v, want %v", try, got, tc.groups)
				}
			}
		})
	}
}

// TestAutoPrefersTheSimplerOfNearTies: auto's choice is predicted within autoTieMargin of the
// fastest candidate, and when a flat candidate is that close it runs a flat one, with no more
// messages than any other flat candidate that close.
func TestAutoPrefersTheSimplerOfNearTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for p := 1; p <= 9; p++ {
		for pname, host := range placements(p, 4, rng) {
			for _, bytes := range []int{64 << 10, 1 << 20, 16 << 20} {
				m := rackMatrix(host, make([]int, p), nil) // uniform: one rack
				a := newAuto(Options{Links: m})
				b := newBuilder(p, 0, bytes/4, 4, DefaultSegmentBytes)
				got := a.decide(kindAllReduce, b)
				fastest, flat, flatMsgs := math.Inf(1), math.Inf(1), math.MaxInt
				for _, c := range a.candidates(kindAllReduce) {
					tc, err := simulateKind(c.alg, kindAllReduce, p, b.n, 4, DefaultSegmentBytes, a.model())
					if err != nil {
						t.Fatal(err)
					}
					fastest = math.Min(fastest, tc)
					if !strings.HasPrefix(c.name, hierPrefix) {
						flat = math.Min(flat, tc)
					}
				}
				for _, c := range a.candidates(kindAllReduce) {
					tc, _ := simulateKind(c.alg, kindAllReduce, p, b.n, 4, DefaultSegmentBytes, a.model())
					if !strings.HasPrefix(c.name, hierPrefix) && tc <= (1+autoTieMargin)*fastest {
						flatMsgs = min(flatMsgs, messages(c.alg, kindAllReduce, b))
					}
				}
				what := fmt.Sprintf("p=%d %s %d B: chose %s (%.3g s, fastest %.3g s)", p, pname, bytes, got.name, got.predicted, fastest)
				if got.predicted > (1+autoTieMargin)*fastest {
					t.Errorf("%s: more than %g over the fastest", what, autoTieMargin)
				}
				if flat <= (1+autoTieMargin)*fastest {
					if strings.HasPrefix(got.name, hierPrefix) {
						t.Errorf("%s: a flat candidate is within the margin (%.3g s)", what, flat)
					} else if n := messages(got.alg, kindAllReduce, b); n > flatMsgs {
						t.Errorf("%s: %d messages, a flat candidate within the margin sends %d", what, n, flatMsgs)
					}
				}
			}
		}
	}
}
