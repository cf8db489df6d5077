package trainer

import (
	"fmt"
	"testing"
	"time"
)

// esyncStep is one scripted call to the state machine: a query (want = READY?) or a reset.
type esyncStep struct {
	reset    bool
	rank, k  int
	c        time.Duration // query: last step time
	round    int           // reset: the new round
	te, now  time.Duration
	want     bool
	wantEps  time.Duration // when > 0, the ε in force after this step
	wantTRnd int           // when > 0, the round T after this step
}

func q(rank, k int, c, te, now time.Duration, want bool) esyncStep {
	return esyncStep{rank: rank, k: k, c: c, te: te, now: now, want: want}
}

func rs(rank, round int, te time.Duration) esyncStep {
	return esyncStep{reset: true, rank: rank, round: round, te: te}
}

const ms = time.Millisecond

func TestESyncStatePredicates(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		epsilon time.Duration
		factor  float64
		script  []esyncStep
	}{
		{
			name: "k=0 is never ready, even for the slowest", size: 2, epsilon: 5 * ms,
			script: []esyncStep{
				q(1, 0, 100*ms, 0, 0, false),
				q(0, 0, 1*ms, 0, 0, false),
			},
		},
		{
			name: "the slowest is ready after one step", size: 3, epsilon: 5 * ms,
			script: []esyncStep{
				q(0, 1, 10*ms, 10*ms, 10*ms, true), // the only rank with c > 0 is the slowest: r == s
			},
		},
		{
			name: "a fast rank steps while one more step plus eps fits before the slowest's finish", size: 2, epsilon: 5 * ms,
			script: []esyncStep{
				q(1, 1, 100*ms, 100*ms, 100*ms, true), // rank 1 is the slowest: ready at k=1
				// rank 0 is fast (10 ms); the slowest finished at 100 ms + 100 ms = 200 ms predicted.
				q(0, 1, 10*ms, 110*ms, 110*ms, true), // slowest already ready → ready
			},
		},
		{
			name: "fast rank before the slowest is ready: eps edge", size: 2, epsilon: 5 * ms,
			script: []esyncStep{
				q(1, 0, 100*ms, 0, 0, false),         // the slowest reports c but has not stepped this round
				q(0, 1, 10*ms, 50*ms, 50*ms, false),  // rest = 0+100-50 = 50 > 10+5
				q(0, 2, 10*ms, 80*ms, 85*ms, false),  // rest = 100-85 = 15 = 10+5: not >, NOT-READY
				q(0, 3, 10*ms, 90*ms, 85*ms+1, true), // rest = 15ms-1ns < 15ms: READY
			},
		},
		{
			name: "ties go to the lowest rank", size: 3, epsilon: 1 * ms,
			script: []esyncStep{
				q(2, 1, 30*ms, 0, 0, true), // alone slowest
				rs(2, 2, 30*ms),            // T=2, clears ready
				rs(0, 2, 30*ms), rs(1, 2, 30*ms),
				q(1, 1, 30*ms, 40*ms, 40*ms, true), // ranks 1 and 2 tie at 30 ms: the slowest is 1 = r
			},
		},
		{
			name: "not ready while the slowest has not reset into the current round", size: 3, epsilon: 5 * ms,
			script: []esyncStep{
				q(2, 1, 200*ms, 0, 0, true), // slowest, ready
				rs(0, 2, 10*ms),             // rank 0 is first through: T=2
				q(0, 0, 10*ms, 10*ms, 10*ms, false),
				q(0, 1, 10*ms, 20*ms, 20*ms, false), // rank 2 (slowest) still in round 1: NOT
				q(0, 2, 10*ms, 30*ms, 30*ms, false),
				rs(2, 2, 35*ms),                     // the slowest resets late
				q(0, 3, 10*ms, 40*ms, 40*ms, false), // rest = 35+200-40 = 195 > 15
				q(2, 1, 200*ms, 235*ms, 235*ms, true),
				q(0, 4, 10*ms, 50*ms, 50*ms, true), // slowest ready
			},
		},
		{
			name: "reset clears k and ready once per round", size: 2, epsilon: 5 * ms,
			script: []esyncStep{
				q(1, 1, 50*ms, 0, 0, true),
				q(0, 1, 10*ms, 10*ms, 10*ms, true),
				rs(1, 2, 60*ms),
				{reset: true, rank: 0, round: 2, te: 61 * ms, wantTRnd: 2},
				// The new round: rank 1 is still the slowest but not ready until it steps.
				q(0, 1, 10*ms, 71*ms, 71*ms, false), // rest = 60+50-71 = 39 > 15
				q(1, 1, 50*ms, 110*ms, 110*ms, true),
				q(0, 2, 10*ms, 111*ms, 111*ms, true),
			},
		},
		{
			name: "auto eps is factor × median of the reported step times", size: 3, factor: 0.5,
			script: []esyncStep{
				{rank: 0, k: 0, c: 10 * ms, wantEps: 5 * ms},
				{rank: 1, k: 0, c: 30 * ms, wantEps: 10 * ms},
				{rank: 2, k: 0, c: 100 * ms, wantEps: 15 * ms},
				q(2, 1, 100*ms, 100*ms, 100*ms, true),
				// rest = 100+100-150 = 50; c + ε = 40 + 15: 55 > 50 → READY.
				{rank: 1, k: 1, c: 40 * ms, te: 150 * ms, now: 150 * ms, want: true},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sm := newESyncState(tc.size, tc.epsilon, tc.factor)
			for i, st := range tc.script {
				where := fmt.Sprintf("step %d (%+v)", i, st)
				if st.reset {
					sm.reset(st.rank, st.round, st.te)
				} else if got := sm.query(st.rank, st.k, st.c, st.te, st.now); got != st.want {
					t.Fatalf("%s: READY = %v, want %v", where, got, st.want)
				}
				if st.wantEps > 0 && sm.eps() != st.wantEps {
					t.Fatalf("%s: ε = %v, want %v", where, sm.eps(), st.wantEps)
				}
				if st.wantTRnd > 0 && sm.round != st.wantTRnd {
					t.Fatalf("%s: T = %d, want %d", where, sm.round, st.wantTRnd)
				}
			}
		})
	}
}

// TestESyncStateTiesAndReset checks the slowest's tie rule and reset's bookkeeping directly.
func TestESyncStateTiesAndReset(t *testing.T) {
	sm := newESyncState(4, ms, 0)
	for r, c := range []time.Duration{5 * ms, 9 * ms, 9 * ms, 2 * ms} {
		sm.query(r, 0, c, 0, 0)
	}
	if s := sm.slowest(); s != 1 {
		t.Fatalf("slowest = %d, want 1 (ties to the lowest rank)", s)
	}
	sm.query(1, 1, 9*ms, 9*ms, 9*ms) // ready
	sm.reset(3, 2, 20*ms)
	for r, rec := range sm.recs {
		if rec.ready == 2 {
			t.Fatalf("after the first reset of round 2, rank %d is flagged ready in round 2", r)
		}
	}
	if sm.recs[1].ready != 1 || sm.recs[3].k != 0 || sm.round != 2 {
		t.Fatalf("the first reset of round 2 lost rank 1's READY of round 1 or kept rank 3's k, or T is %d: %+v", sm.round, sm.recs)
	}
	if sm.recs[3].round != 2 || sm.recs[1].round != 1 || sm.recs[3].te != 20*ms {
		t.Fatalf("reset bookkeeping wrong: %+v", sm.recs)
	}
	sm.query(3, 1, 2*ms, 22*ms, 22*ms)
	sm.recs[3].ready = 2
	sm.reset(0, 2, 25*ms) // same round: must not clear anyone
	if sm.recs[3].ready != 2 || sm.recs[3].k != 1 {
		t.Fatalf("a second reset into the same round cleared state: %+v", sm.recs[3])
	}
	sm.reset(1, 1, 26*ms) // a late reset into an earlier round: T does not go back
	if sm.round != 2 {
		t.Fatalf("a reset into round 1 after round 2's took T back to %d", sm.round)
	}
}

// With overlapping rounds a rank resets into round 2 while others still step in round 1: the
// ranks still in round 1 are judged in round 1, so the one that turns out the slowest is
// READY at its first step there, and the others once it is (or is past round 1); ranks in
// round 2 wait until the slowest has reset into round 2. Judged in round 2, rank 1 waited for
// itself to reset into round 2: a hang.
func TestESyncStateJudgesEachRankInItsRound(t *testing.T) {
	sm := newESyncState(3, 5*ms, 0)
	for r := range 3 {
		sm.query(r, 0, 0, 0, 0)
	}
	if !sm.query(0, 1, 2*ms, 2*ms, 2*ms) { // the slowest reported so far
		t.Fatal("rank 0, the slowest so far, is not READY after its step")
	}
	sm.reset(0, 2, 3*ms) // hands round 1 over and steps on in round 2
	if !sm.query(1, 1, 60*ms, 60*ms, 60*ms) {
		t.Fatal("rank 1, the slowest, still in round 1 after rank 0 reset into round 2, is not READY: it would wait for itself")
	}
	if sm.query(0, 1, 2*ms, 61*ms, 61*ms) {
		t.Fatal("rank 0 is READY in round 2 before the slowest has reset into it")
	}
	sm.reset(1, 2, 62*ms)
	// Rank 2, still in round 1 although the slowest is past it, is READY at its first query.
	if !sm.query(2, 1, 3*ms, 63*ms, 63*ms) {
		t.Fatal("rank 2, still in round 1 with the slowest past it, is not READY")
	}
	if sm.query(0, 2, 2*ms, 64*ms, 64*ms) {
		t.Fatal("rank 0 is READY in round 2 although the slowest's step there ends in 58 ms")
	}
	if !sm.query(1, 1, 60*ms, 122*ms, 122*ms) {
		t.Fatal("rank 1, the slowest in round 2, is not READY after its step")
	}
	if !sm.query(0, 9, 2*ms, 123*ms, 123*ms) {
		t.Fatal("rank 0 is not READY in round 2 once the slowest is")
	}
}
