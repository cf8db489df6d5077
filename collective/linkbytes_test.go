package collective

import (
	"context"
	"testing"

	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// twoHosts puts ranks 0,1 on one host and 2,3 on another, as the p2p endpoint's proof would.
func twoHosts(eps []transport.Endpoint) []transport.Endpoint {
	out := make([]transport.Endpoint, len(eps))
	for r, ep := range eps {
		row := make([]bool, len(eps))
		for q := range row {
			row[q] = q/2 == r/2
		}
		out[r] = &hostRow{Endpoint: ep, row: row}
	}
	return out
}

// TestLinkBytesRingTwoHosts: a ring allreduce of n floats on 4 ranks, ranks 0,1 on one host and
// 2,3 on another, sends 2(p-1) blocks of n/p floats from every rank to the next one in the
// ring, 0→1→2→3→0: ranks 0 and 2 send all of theirs within their host, ranks 1 and 3 all of
// theirs across hosts, 2·3·250·4 = 6000 bytes each for n = 1000. Nothing is in another group:
// the job has no link matrix.
func TestLinkBytesRingTwoHosts(t *testing.T) {
	const p, n = 4, 1000
	eps := twoHosts(transport.NewMemJob(p))
	comms := make([]*Comm, p)
	for r := range p {
		c, err := New(eps[r], Options{Algorithm: "ring"})
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
	}
	(&job{comms: comms}).mustRun(t, "allreduce", func(c *Comm) error {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(c.Rank() + i)
		}
		return c.AllReduce(context.Background(), F32(x), Sum)
	})
	const each = 2 * (p - 1) * (n / p) * 4
	want := []LinkBytes{{each, 0, 0}, {0, each, 0}, {each, 0, 0}, {0, each, 0}}
	crossing := int64(0)
	for r, c := range comms {
		got := c.LinkBytes()
		if got != want[r] {
			t.Errorf("rank %d: bytes sent by link class (host, hosts, groups) = %v, want %v", r, got, want[r])
		}
		if sum := got[LinkHost] + got[LinkHosts] + got[LinkGroups]; sum != c.BytesSent() {
			t.Errorf("rank %d: the classes sum to %d bytes, BytesSent says %d", r, sum, c.BytesSent())
		}
		crossing += got[LinkHosts]
	}
	if crossing != 2*each {
		t.Errorf("%d bytes crossed hosts, want %d", crossing, 2*each)
	}
}

// TestLinkClassGroups: with a link matrix of four one-rank hosts in two racks (fast links
// within a rack, 100× slower between them), a peer in the other rack is LinkGroups, the other
// host of the rack LinkHosts, and a peer the transport proved on this host LinkHost whatever
// the matrix says.
func TestLinkClassGroups(t *testing.T) {
	const p = 4
	m := topology.Uniform(p, 1e-5, 1e-8)
	for r := range p {
		for q := range p {
			if r/2 != q/2 {
				m.Links[r][q] = topology.Link{Alpha: 1e-3, Beta: 1e-6}
			}
		}
	}
	eps := transport.NewMemJob(p)
	lc := NewLinkCounter(&hostRow{Endpoint: eps[0], row: []bool{true, false, false, false}}, m)
	want := []LinkClass{LinkHost, LinkHosts, LinkGroups, LinkGroups}
	for q, w := range want {
		if got := lc.Class(q); got != w {
			t.Errorf("rank 0 → rank %d: class %v, want %v", q, got, w)
		}
	}
	lc.Count(2, 10)
	lc.Count(1, 3)
	lc.Count(p, 99) // not a rank of the job: not counted
	if got, w := lc.Bytes(), (LinkBytes{0, 3, 10}); got != w {
		t.Errorf("counted %v, want %v", got, w)
	}
}

// TestLinkBytesArena: a rank of a one-host job whose calls run through the shared-memory
// arena sends nothing over a link, and its link count is what it wrote into the arena once: its
// whole buffer for an allreduce, its block for an all-gather, the buffer at a broadcast's
// root only.
func TestLinkBytesArena(t *testing.T) {
	const p, n = 3, 301
	j := newArenaJob(t, p, 1<<20)
	j.mustRun(t, "calls", func(c *Comm) error {
		ctx := context.Background()
		if err := c.AllReduce(ctx, F32(make([]float32, n)), Sum); err != nil {
			return err
		}
		if err := c.AllGather(ctx, F32(make([]float32, n))); err != nil {
			return err
		}
		return c.Broadcast(ctx, F32(make([]float32, n)), 1)
	})
	for r, c := range j.comms {
		lo, hi := Partition(n, p, r)
		want := int64(n+hi-lo) * 4
		if r == 1 {
			want += n * 4
		}
		if got := c.LinkBytes(); got != (LinkBytes{want, 0, 0}) {
			t.Errorf("rank %d: bytes by link class %v, want %v in the host", r, got, want)
		}
		if c.BytesSent() != 0 {
			t.Errorf("rank %d: BytesSent %d through the arena, want 0 (nothing went over a link)", r, c.BytesSent())
		}
	}
}
