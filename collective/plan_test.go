package collective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hetsync/hetsync/topology"
)

// planCase is one matrix the planner is held to the replay on.
type planCase struct {
	name string
	m    *topology.Matrix
}

// planCases are the planner tests' matrices: p ranks in every placement (block, cyclic,
// uneven, random) over hosts of about perHost ranks, in two racks joined by a thin uplink, and
// the same with one host behind slow links.
func planCases(ps []int, perHost int) []planCase {
	rng := rand.New(rand.NewPCG(28, 1))
	var out []planCase
	for _, p := range ps {
		pl := placements(p, max(2, p/perHost), rng)
		names := make([]string, 0, len(pl))
		for name := range pl {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			host := pl[name]
			out = append(out, planCase{fmt.Sprintf("p=%d/%s", p, name), rackMatrix(host, twoRacks(host), nil)})
			out = append(out, planCase{fmt.Sprintf("p=%d/%s/slow-host", p, name), rackMatrix(host, twoRacks(host), map[int]bool{1: true})})
		}
	}
	return out
}

// skipUnderRace skips a planner test that only computes (one goroutine, nothing shared) for
// seconds: the race detector has nothing to find in it and multiplies its time. make test runs
// it in its pass without -race.
func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("pure computation, seconds long: runs in the pass without -race")
	}
}

// replayTimes is the replay's time of every candidate: the reference.
func replayTimes(t *testing.T, a *auto, kind collKind, b *builder) []float64 {
	t.Helper()
	var out []float64
	for _, c := range a.candidates(kind) {
		tc, err := simulateKind(c.alg, kind, b.p, b.n, b.elemSize, b.seg*b.elemSize, a.model())
		if err != nil {
			t.Fatalf("replaying %s: %v", c.name, err)
		}
		out = append(out, tc)
	}
	return out
}

// TestClosedFormPlanMatchesTheReplay: with the full replay turned off (every call priced from
// the closed forms, and the shortlist they leave replayed, whatever p), auto's allreduce choice
// on the planner tests' matrices, replayed in full, is within 5 % of the fastest candidate the
// replay finds.
func TestClosedFormPlanMatchesTheReplay(t *testing.T) {
	skipUnderRace(t)
	cases := append(planCases([]int{5, 6, 9, 12, 16}, 3), planCases([]int{24, 32}, 8)...)
	if !testing.Short() {
		cases = append(cases, planCases([]int{64}, 8)[:2]...)
	}
	worst, worstClosed, worstCase := 1.0, 1.0, ""
	for _, tc := range cases {
		for _, bytes := range []int{64 << 10, 16 << 20} {
			p := tc.m.P
			b := newBuilder(p, 0, bytes/4, 4, DefaultSegmentBytes)
			a := newAuto(Options{Links: tc.m})
			a.replayRanks = 0
			got := a.decide(kindAllReduce, b)
			ref := replayTimes(t, a, kindAllReduce, b)
			best := slices.Min(ref)
			i := slices.IndexFunc(a.candidates(kindAllReduce), func(c autoCandidate) bool { return c.name == got.name })
			ratio := ref[i] / best
			worst = math.Max(worst, ratio)
			// The closed forms alone (the midpoint of their bounds), as auto runs them above
			// planShortlistRanks: logged, not held to 5 %.
			cands := a.candidates(kindAllReduce)
			lo, hi, _ := a.closedForms(kindAllReduce, b, cands)
			mid := 0
			for j := range lo {
				if lo[j]+hi[j] < lo[mid]+hi[mid] {
					mid = j
				}
			}
			if r := ref[mid] / best; r > worstClosed {
				worstClosed, worstCase = r, fmt.Sprintf("%s %d B: %s against %s", tc.name, bytes, cands[mid].name, cands[slices.Index(ref, best)].name)
			}
			if ratio > 1.05 {
				bi := slices.Index(ref, best)
				t.Errorf("%s %d B: auto chose %s (closed forms [%.4g, %.4g] s), replayed %.4g s, %.3f× the replay's best, %s: %.4g s (closed forms [%.4g, %.4g] s)",
					tc.name, bytes, got.name, lo[i], hi[i], ref[i], ratio, cands[bi].name, best, lo[bi], hi[bi])
			}
		}
	}
	t.Logf("worst: auto's choice replays %.3f× the replay's best; the closed forms' alone %.3f× (%s)", worst, worstClosed, worstCase)
}

// twoRackTiers is the benchmark's network: hosts of 8 ranks in two racks, the planner tests'
// link speeds (an uplink 10× thinner than the access links).
func twoRackTiers(p int) topology.Tiers {
	return topology.Tiers{Hosts: p / 8, RanksPerHost: 8, Groups: 2,
		Local:  topology.Link{Alpha: testAlpha, Beta: testBetaLocal},
		Access: topology.Link{Alpha: testAlpha, Beta: testBetaHost},
		Uplink: topology.Link{Alpha: testAlpha, Beta: testBetaRack}}
}

// BenchmarkPlan is the time auto takes to decide one call shape (a 64 MiB float32 allreduce)
// on a two-rack network of p ranks: per op, one decision with empty caches. The /bucket
// variants decide a size whose bucket is decided already (fromBucket), the /setup variants
// add what a new matrix costs once (the layout and the planner's network).
func BenchmarkPlan(b *testing.B) {
	for _, p := range []int{64, 256, 1024, 4096, 8192} {
		hm, err := twoRackTiers(p).HostMatrix()
		if err != nil {
			b.Fatal(err)
		}
		call := newBuilder(p, 0, 64<<20/4, 4, DefaultSegmentBytes)
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			a := newHostAuto(hm)
			a.decide(kindAllReduce, call)
			b.ResetTimer()
			for range b.N {
				clear(a.choice)
				clear(a.buckets)
				a.decide(kindAllReduce, call)
			}
		})
		b.Run(fmt.Sprintf("p=%d/bucket", p), func(b *testing.B) {
			a := newHostAuto(hm)
			a.decide(kindAllReduce, call)
			b.ResetTimer()
			for range b.N {
				clear(a.choice)
				a.decide(kindAllReduce, call)
			}
		})
		b.Run(fmt.Sprintf("p=%d/setup", p), func(b *testing.B) {
			for range b.N {
				newHostAuto(hm).decide(kindAllReduce, call)
			}
		})
	}
}

// TestPlanGroupSumsMatchTheHostSums: on a two-tier network the parameter server's per-host
// sums taken over groups equal the sums over every host pair.
func TestPlanGroupSumsMatchTheHostSums(t *testing.T) {
	for _, host := range [][]int{denseHosts([]int{0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 4, 5}), {0, 1, 2, 3}} {
		m := rackMatrix(host, twoRacks(host), nil)
		net := hostPlanNet(newLayout(m))
		if net.groupLinks == nil {
			t.Fatalf("hosts %v: a two-rack matrix has no group links", host)
		}
		ps := configure(algConfig{base: "ps"}, paramServer{}, newLayout(m)).(paramServer)
		nodes := placedPSNodes(net, ps, 1<<20)
		segs := make([]float64, len(nodes.count))
		for h := range segs {
			segs[h] = float64(h%3 + 1)
		}
		byGroup := psHostSums(net, nodes, segs, 4)
		flat := *net
		flat.groupLinks = nil
		byHost := psHostSums(&flat, nodes, segs, 4)
		for h := range byHost {
			g, w := byGroup[h], byHost[h]
			for i, pair := range [][2]float64{{g.pushSend, w.pushSend}, {g.pushRecv, w.pushRecv}, {g.pushMsgs, w.pushMsgs},
				{g.pullSend, w.pullSend}, {g.pullRecv, w.pullRecv}, {g.pullMsgs, w.pullMsgs}} {
				if math.Abs(pair[0]-pair[1]) > 1e-9*math.Max(1, math.Abs(pair[1])) {
					t.Errorf("hosts %v, host %d, sum %d: over groups %g, over hosts %g", host, h, i, pair[0], pair[1])
				}
			}
		}
	}
}

// TestPlanIsTheSameOnEveryRank: at thousands of ranks every rank decides every call shape the
// same, from its own copy of the network's description.
func TestPlanIsTheSameOnEveryRank(t *testing.T) {
	skipUnderRace(t)
	const p = 2048
	for _, kind := range []collKind{kindAllReduce, kindReduceScatter, kindAllGather} {
		for _, bytes := range []int{4 << 10, 1 << 20, 64 << 20} {
			var first autoChoice
			for _, r := range []int{0, 1, p/2 + 3, p - 1} {
				hm, err := twoRackTiers(p).HostMatrix()
				if err != nil {
					t.Fatal(err)
				}
				got := newHostAuto(hm).decide(kind, newBuilder(p, r, bytes/4, 4, DefaultSegmentBytes))
				if r == 0 {
					first = got
					if math.IsInf(got.predicted, 0) || got.predicted <= 0 {
						t.Fatalf("%v %d B: rank 0 chose %s predicted %g s", kind, bytes, got.name, got.predicted)
					}
				} else if got.name != first.name || got.predicted != first.predicted {
					t.Fatalf("%v %d B: rank %d chose %s (%g s), rank 0 %s (%g s)", kind, bytes, r, got.name, got.predicted, first.name, first.predicted)
				}
			}
			t.Logf("p=%d %v %d B: %s, predicted %.4g s", p, kind, bytes, first.name, first.predicted)
		}
	}
}

// TestPlanBucketsAgreeWithEverySize: where a size takes its bucket's decision, that is the
// decision the size would get on its own, at every size from 1 KiB to 256 MiB in steps of
// an eighth of a power of two.
func TestPlanBucketsAgreeWithEverySize(t *testing.T) {
	skipUnderRace(t)
	const p = 1024
	hm, err := twoRackTiers(p).HostMatrix()
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, kind := range []collKind{kindAllReduce, kindReduceScatter, kindAllGather} {
		bucketed, alone := newHostAuto(hm), newHostAuto(hm)
		for k := 8; k < 26; k++ {
			for j := range 8 {
				n := 1<<k + j<<(k-3)
				b := newBuilder(p, 0, n, 4, DefaultSegmentBytes)
				got := bucketed.decide(kind, b)
				want := alone.choose(kind, b)
				if got.name != want.name || got.predicted != want.predicted {
					t.Errorf("%v, %d elements: the bucket gave %s (%g s), alone %s (%g s)", kind, n, got.name, got.predicted, want.name, want.predicted)
				}
			}
		}
		for _, bk := range bucketed.buckets {
			if bk.name != "" {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Errorf("no bucket shared its decision")
	}
	t.Logf("%d buckets shared their decision", shared)
}

// BenchmarkPlanReplay is the reference BenchmarkPlan measures against: the same decision by
// the full replay of every candidate (what auto does up to planReplayRanks).
func BenchmarkPlanReplay(b *testing.B) {
	for _, p := range []int{16, 64, 256} {
		hm, err := twoRackTiers(p).HostMatrix()
		if err != nil {
			b.Fatal(err)
		}
		call := newBuilder(p, 0, 64<<20/4, 4, DefaultSegmentBytes)
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			a := newHostAuto(hm)
			a.replayRanks = p
			for range b.N {
				clear(a.choice)
				a.decide(kindAllReduce, call)
			}
		})
	}
}

// TestUniformPlanMatchesTheReplay: without a link matrix, above the full replay's rank count,
// auto's choice for every collective, replayed in full, is within 5 % of the replay's best.
func TestUniformPlanMatchesTheReplay(t *testing.T) {
	for _, p := range []int{9, 12, 16, 24, 33} {
		for _, bytes := range []int{4 << 10, 1 << 20, 64 << 20} {
			for _, kind := range []collKind{kindAllReduce, kindReduceScatter, kindAllGather} {
				b := newBuilder(p, 0, bytes/4, 4, DefaultSegmentBytes)
				a := newAuto(Options{})
				got := a.decide(kind, b)
				ref := replayTimes(t, a, kind, b)
				i := slices.IndexFunc(a.candidates(kind), func(c autoCandidate) bool { return c.name == got.name })
				if best := slices.Min(ref); ref[i] > 1.05*best {
					t.Errorf("p=%d %v %d B: auto chose %s, replayed %.4g s, %.3f× the replay's best %.4g s", p, kind, bytes, got.name, ref[i], ref[i]/best, best)
				}
			}
		}
	}
}

// TestClosedFormsAloneAtScale: above the shortlist's rank count auto decides from the closed
// forms alone. At 128 and 256 ranks on two racks, its choice replayed in full is within 5 % of
// every candidate the bounds leave plausible (lower bound within 1.5× of the choice's upper
// bound), and its prediction within 10 % of its replay.
func TestClosedFormsAloneAtScale(t *testing.T) {
	skipUnderRace(t)
	for _, p := range []int{128, 256} {
		hm, err := twoRackTiers(p).HostMatrix()
		if err != nil {
			t.Fatal(err)
		}
		for _, bytes := range []int{64 << 10, 16 << 20} {
			b := newBuilder(p, 0, bytes/4, 4, DefaultSegmentBytes)
			a := newHostAuto(hm)
			got := a.decide(kindAllReduce, b)
			cands := a.candidates(kindAllReduce)
			lo, hi, _ := a.closedForms(kindAllReduce, b, cands)
			i := slices.IndexFunc(cands, func(c autoCandidate) bool { return c.name == got.name })
			replayed := func(j int) float64 {
				tj, err := simulateKind(cands[j].alg, kindAllReduce, p, b.n, 4, DefaultSegmentBytes, a.model())
				if err != nil {
					t.Fatalf("replaying %s: %v", cands[j].name, err)
				}
				return tj
			}
			mine := replayed(i)
			if r := got.predicted / mine; r > 1.1 || r < 1/1.1 {
				t.Errorf("p=%d %d B: %s predicted %.4g s, replays %.4g s", p, bytes, got.name, got.predicted, mine)
			}
			for j, c := range cands {
				if j == i || lo[j] > 1.5*hi[i] {
					continue
				}
				if tj := replayed(j); mine > 1.05*tj {
					t.Errorf("p=%d %d B: %s replays %.4g s, %s %.4g s", p, bytes, got.name, mine, c.name, tj)
				}
			}
		}
	}
}
