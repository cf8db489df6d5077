package topology

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

func TestGroupHosts(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		name string
		rows [][]bool
		want []int
	}{
		{"one rank", [][]bool{{yes}}, []int{0}},
		{"two apart", [][]bool{{yes, no}, {no, yes}}, []int{0, 1}},
		{"two together", [][]bool{{yes, yes}, {yes, yes}}, []int{0, 0}},
		{"one-sided proof parts", [][]bool{{yes, yes}, {no, yes}}, []int{0, 1}},
		{"interleaved", [][]bool{
			{yes, no, yes, no},
			{no, yes, no, yes},
			{yes, no, yes, no},
			{no, yes, no, yes}}, []int{0, 1, 0, 1}},
		// 0~1 and 1~2 but not 0~2: 2 does not join host 0, whose member 0 it cannot prove.
		{"not transitive", [][]bool{
			{yes, yes, no},
			{yes, yes, yes},
			{no, yes, yes}}, []int{0, 0, 1}},
	}
	for _, tc := range cases {
		got := groupHosts(tc.rows)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: groupHosts = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMeasureRounds: every host pair is measured once, every host with two ranks once, and no
// rank is in two pairs of one round.
func TestMeasureRounds(t *testing.T) {
	for hosts := 1; hosts <= 9; hosts++ {
		for _, perHost := range []int{1, 2, 3} {
			host := make([]int, 0, hosts*perHost)
			for r := range hosts * perHost {
				host = append(host, r%hosts)
			}
			rounds := measureRounds(host)
			seen := map[[2]int]int{}
			for i, round := range rounds {
				busy := map[int]bool{}
				for _, pr := range round {
					if pr.A >= pr.B || busy[pr.A] || busy[pr.B] {
						t.Fatalf("%d hosts x %d: round %d: pair %v repeats a rank or is out of order: %v", hosts, perHost, i, pr, round)
					}
					busy[pr.A], busy[pr.B] = true, true
					ha, hb := host[pr.A], host[pr.B]
					seen[[2]int{min(ha, hb), max(ha, hb)}]++
				}
			}
			for a := range hosts {
				for b := a; b < hosts; b++ {
					want := 1
					if a == b && perHost == 1 {
						want = 0
					}
					if seen[[2]int{a, b}] != want {
						t.Errorf("%d hosts x %d: hosts %d and %d measured %d times, want %d", hosts, perHost, a, b, seen[[2]int{a, b}], want)
					}
				}
			}
			maxRounds := hosts + 1 // the tournament, and the local round
			if len(rounds) > maxRounds {
				t.Errorf("%d hosts x %d: %d rounds, want at most %d", hosts, perHost, len(rounds), maxRounds)
			}
		}
	}
}

// placed is an endpoint that reports a fixed host for every rank.
type placed struct {
	transport.Endpoint
	host []int
}

func (p placed) SameHost() []bool {
	row := make([]bool, len(p.host))
	for q := range row {
		row[q] = p.host[q] == p.host[p.Rank()]
	}
	return row
}

// MeasureAll runs Measure on every endpoint at once.
func MeasureAll(t *testing.T, eps []transport.Endpoint, opts MeasureOptions) []*Matrix {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mats := make([]*Matrix, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mats[r], errs[r] = Measure(ctx, ep, opts)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return mats
}

// CheckMeasured checks what every measured matrix must satisfy: the same bytes on every rank,
// the hosts wanted, positive α and β on every link, and one value for all rank pairs of one
// host pair and direction.
func CheckMeasured(t *testing.T, mats []*Matrix, wantHost []int) {
	t.Helper()
	enc0, err := mats[0].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for r, m := range mats {
		enc, _ := m.Marshal()
		if !bytes.Equal(enc, enc0) {
			t.Fatalf("rank %d's matrix differs from rank 0's:\n%s\n%s", r, enc, enc0)
		}
	}
	m := mats[0]
	if fmt.Sprint(m.Host) != fmt.Sprint(wantHost) {
		t.Fatalf("hosts %v, want %v", m.Host, wantHost)
	}
	first := map[[3]int]Link{} // host from, host to, direction on one host
	for r := range m.P {
		for q := range m.P {
			if q == r {
				continue
			}
			l := m.Links[r][q]
			if !(l.Alpha > 0 && l.Beta > 0) {
				t.Errorf("link %d->%d: alpha %g, beta %g; want both positive", r, q, l.Alpha, l.Beta)
			}
			key := [3]int{m.Host[r], m.Host[q], 0}
			if m.Host[r] == m.Host[q] && r > q {
				key[2] = 1
			}
			if f, ok := first[key]; ok && f != l {
				t.Errorf("link %d->%d is %+v, another pair of hosts %d->%d is %+v", r, q, l, key[0], key[1], f)
			}
			first[key] = l
		}
	}
}

// quick keeps the in-process tests short: they check the protocol, not the numbers.
var quick = MeasureOptions{LargeBytes: 64 << 10, MaxLargeBytes: 256 << 10, MinLargeTime: 100 * time.Microsecond, SmallReps: 3, LargeReps: 1}

func TestMeasureMem(t *testing.T) {
	for p := 1; p <= 9; p++ {
		t.Run(fmt.Sprintf("np%d/one-host", p), func(t *testing.T) {
			eps := transport.NewMemJob(p)
			defer transport.CloseAll(eps)
			CheckMeasured(t, MeasureAll(t, eps, quick), make([]int, p))
		})
		t.Run(fmt.Sprintf("np%d/hosts-of-rank-mod-3", p), func(t *testing.T) {
			mem := transport.NewMemJob(p)
			defer transport.CloseAll(mem)
			host := make([]int, p)
			for r := range host {
				host[r] = r % 3
			}
			eps := make([]transport.Endpoint, p)
			for r := range eps {
				eps[r] = placed{mem[r], host}
			}
			CheckMeasured(t, MeasureAll(t, eps, quick), host)
		})
	}
	t.Run("defaults", func(t *testing.T) {
		eps := transport.NewMemJob(3)
		defer transport.CloseAll(eps)
		CheckMeasured(t, MeasureAll(t, eps, MeasureOptions{}), []int{0, 0, 0})
	})
}

func TestMeasureOptionsRejected(t *testing.T) {
	eps := transport.NewMemJob(1)
	for _, o := range []MeasureOptions{{SmallBytes: -1}, {LargeBytes: 4, SmallBytes: 8}, {LargeBytes: 1 << 20, MaxLargeBytes: 1 << 10}, {LargeReps: -2}} {
		if _, err := Measure(context.Background(), eps[0], o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// TestMeasureMissingRank: a rank that never measures makes the others fail when the context
// ends, naming it.
func TestMeasureMissingRank(t *testing.T) {
	eps := transport.NewMemJob(3)
	defer transport.CloseAll(eps)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = Measure(ctx, eps[r], quick)
		}()
	}
	wg.Wait()
	if errs[0] == nil || !bytes.Contains([]byte(errs[0].Error()), []byte("rank 2")) {
		t.Errorf("rank 0: %v; want an error naming rank 2", errs[0])
	}
	if errs[1] == nil {
		t.Error("rank 1 measured a job whose rank 2 never came")
	}
}

// BenchmarkMeasure is the cost of the protocol at 16 ranks over the in-process transport, on
// one host (one local pair) and on 16 hosts (15 tournament rounds).
func BenchmarkMeasure(b *testing.B) {
	for _, hosts := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("p16/hosts%d", hosts), func(b *testing.B) {
			const p = 16
			host := make([]int, p)
			for r := range host {
				host[r] = r * hosts / p
			}
			for range b.N {
				mem := transport.NewMemJob(p)
				eps := make([]transport.Endpoint, p)
				for r := range eps {
					eps[r] = placed{mem[r], host}
				}
				var wg sync.WaitGroup
				for _, ep := range eps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := Measure(context.Background(), ep, MeasureOptions{}); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				transport.CloseAll(mem)
			}
		})
	}
}

// TestProbeSize: the next probe is sized for MinLargeTime at the fastest rate shown so far (a
// quarter more), grows at least twofold and at most to MaxLargeBytes, and fourfold when no
// probe has shown a rate.
func TestProbeSize(t *testing.T) {
	o, err := MeasureOptions{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	const kib = 1 << 10
	inf := math.Inf(1)
	tests := []struct {
		n    int
		beta float64 // s/B
		want int
	}{
		{256 * kib, inf, 1024 * kib}, // no rate yet: fourfold
		{4 << 20, inf, 8 << 20},      // fourfold, capped
		{256 * kib, 1e-8, 2500000},   // 100 MB/s: 20 ms × 1.25 is 2.5 MB
		{256 * kib, 1e-7, 512 * kib}, // 10 MB/s: 250 KB is enough, but at least twofold
		{256 * kib, 1e-10, 8 << 20},  // 10 GB/s: capped
		{8<<20 - 1, 1e-8, 8 << 20},   // capped
		{1 << 20, 2.5e-9, 8 << 20},   // 400 MB/s: 10 MB, capped
	}
	for _, tc := range tests {
		if got := probeSize(tc.n, tc.beta, o); got != tc.want {
			t.Errorf("probeSize(%d, %g) = %d, want %d", tc.n, tc.beta, got, tc.want)
		}
	}
}

// talkLog is an endpoint that records which peers its rank sends to and receives from.
type talkLog struct {
	placed
	mu    sync.Mutex
	peers map[int]bool
}

func (l *talkLog) note(peer int) {
	l.mu.Lock()
	l.peers[peer] = true
	l.mu.Unlock()
}

func (l *talkLog) Send(ctx context.Context, to int, h transport.Header, b []byte) error {
	l.note(to)
	return l.placed.Send(ctx, to, h, b)
}

func (l *talkLog) Recv(ctx context.Context, from int, h transport.Header, b []byte) (int, error) {
	l.note(from)
	return l.placed.Recv(ctx, from, h, b)
}

func (l *talkLog) RecvAny(ctx context.Context, from int, ch transport.Channel, b []byte) (transport.Header, int, error) {
	l.note(from)
	return l.placed.RecvAny(ctx, from, ch, b)
}

// TestMeasureTalksAlongATree: at 64 ranks on 8 hosts, no rank talks to more peers than its
// tree's parent and children and one rank per host (its probes), so that over a transport
// that connects on first use rank 0 links to a few ranks, not to every rank as a gather at
// rank 0 would.
func TestMeasureTalksAlongATree(t *testing.T) {
	const p, hosts = 64, 8
	host := make([]int, p)
	for r := range host {
		host[r] = r * hosts / p
	}
	mem := transport.NewMemJob(p)
	defer transport.CloseAll(mem)
	logs := make([]*talkLog, p)
	eps := make([]transport.Endpoint, p)
	for r := range eps {
		logs[r] = &talkLog{placed: placed{mem[r], host}, peers: make(map[int]bool)}
		eps[r] = logs[r]
	}
	mats := MeasureAll(t, eps, quick)
	if mats[0].P != p {
		t.Fatalf("a matrix of %d ranks, want %d", mats[0].P, p)
	}
	for r, l := range logs {
		if most := treeFanout + 1 + hosts; len(l.peers) > most {
			t.Errorf("rank %d talked to %d peers, want at most %d (tree and one rank per host)", r, len(l.peers), most)
		}
	}
	t.Logf("rank 0 talked to %d peers of %d", len(logs[0].peers), p-1)
}
