package collective

import (
	"math"
	"sort"
)

// paramServer is a synchronous push/pull parameter server used as an allreduce. The vector is
// cut into k shards hosted by k server ranks (k = Options.Servers, or p when 0: every rank a
// colocated server). Every rank pushes shard s to its server; the server reduces the pushes
// into its own buffer in a fixed order (the ranks after it, mod p) and sends the result back
// to every rank. A server's own contribution never travels. Pushes and pulls start at rank+1
// and rotate so that the p-1 flows into a server do not all arrive at once.
//
// Without a link matrix the servers are ranks 0..k-1 with equal shards. With one (placed),
// the servers are the best-connected ranks, one per host before a second on any host, and
// each shard is in proportion to its server's bandwidth, so that a server behind a slow link
// carries less.
//
// Reduce-scatter pulls only each rank's Partition block; allgather pushes each rank's Partition
// block to the servers owning it, then pulls as allreduce does.
//
// Cost, k servers: 2α·(per flow) with p-1 concurrent flows; a worker sends and receives n
// (less its own shard), a server receives and sends (p-1)·n/k:
// T ≈ 2(p-1)α + max(n, (p-1)n/k)·2β for a single NIC per rank; colocated (k = p) it moves the
// same 2(p-1)/p·n as the ring in two rounds. It is incast-sensitive; it is for dedicated
// servers with spare bandwidth (BytePS) and for networks where the ring's slowest hop is
// slower than a server's links.
type paramServer struct {
	servers int
	// place lists the server ranks (shard s on place[s]) and weight their shares; nil means
	// ranks 0..k-1 with equal shares.
	place  []int
	weight []float64
}

func (ps paramServer) k(p int) int {
	if ps.place != nil {
		return len(ps.place)
	}
	if ps.servers <= 0 || ps.servers > p {
		return p
	}
	return ps.servers
}

// server is the rank hosting shard s.
func (ps paramServer) server(s int) int {
	if ps.place != nil {
		return ps.place[s]
	}
	return s
}

// shardOf is the shard rank r hosts, or -1.
func (ps paramServer) shardOf(p, r int) int {
	if ps.place == nil {
		if r < ps.k(p) {
			return r
		}
		return -1
	}
	for s, q := range ps.place {
		if q == r {
			return s
		}
	}
	return -1
}

func (ps paramServer) shard(b *builder, s int) (int, int) {
	if ps.weight == nil {
		return Partition(b.n, ps.k(b.p), s)
	}
	return weightedPartition(b.n, ps.weight, s)
}

// weightedPartition cuts n elements into len(w) ranges in proportion to w; range i is
// [lo, hi). Boundaries are rounded from the running sum, so the ranges tile [0, n).
func weightedPartition(n int, w []float64, i int) (int, int) {
	total, before := 0.0, 0.0
	for j, x := range w {
		total += x
		if j < i {
			before += x
		}
	}
	lo := int(math.Round(float64(n) * before / total))
	hi := int(math.Round(float64(n) * (before + w[i]) / total))
	if i == len(w)-1 {
		hi = n
	}
	return lo, hi
}

// placeServers picks k server ranks from the layout and their shares: hosts by their network
// bandwidth (fastest first, ties to the lower host), one rank per host in that order before a
// second rank of any host; a server's share is its host's bandwidth divided among the
// servers on the host.
func placeServers(l *layout, k int) ([]int, []float64) {
	nh := len(l.hosts)
	bw := make([]float64, nh)
	for h := range nh {
		beta := math.Inf(1)
		for g := range nh {
			if g != h {
				beta = math.Min(beta, l.linkBeta(h, g))
			}
		}
		if math.IsInf(beta, 1) || beta <= 0 {
			bw[h] = 1 // one host: nothing to weigh
		} else {
			bw[h] = 1 / beta
		}
	}
	hosts := make([]int, nh)
	for h := range hosts {
		hosts[h] = h
	}
	sort.SliceStable(hosts, func(i, j int) bool { return bw[hosts[i]] > bw[hosts[j]] })
	var place []int
	perHost := make([]int, nh)
	for round := 0; len(place) < k; round++ {
		for _, h := range hosts {
			if round < len(l.hosts[h]) && len(place) < k {
				place = append(place, l.hosts[h][round])
				perHost[h]++
			}
		}
	}
	weight := make([]float64, k)
	for s, r := range place {
		h := l.hm.Host[r]
		weight[s] = bw[h] / float64(perHost[h])
	}
	return place, weight
}

// placed is ps with its servers placed on l's hosts (placeServers): auto considers ps only
// so, with a link matrix (placer).
func (ps paramServer) placed(l *layout) algorithm {
	ps.place, ps.weight = placeServers(l, ps.k(l.p))
	return ps
}

// withServers is ps with k server ranks, Options.Servers (sharded).
func (ps paramServer) withServers(k int) algorithm {
	ps.servers = k
	return ps
}

// push appends the pushes of [lo, hi)-restricted shards and, on servers, their reduction.
func (ps paramServer) push(b *builder, reduce bool, lo, hi int) {
	me := b.rank
	for i := 1; i <= b.p; i++ {
		peer := mod(me+i, b.p)
		s := ps.shardOf(b.p, peer)
		if s < 0 || peer == me {
			continue
		}
		slo, shi := ps.shard(b, s)
		b.send(peer, max(slo, lo), min(shi, hi))
	}
	if s := ps.shardOf(b.p, me); s >= 0 {
		slo, shi := ps.shard(b, s)
		for i := 1; i < b.p; i++ {
			w := mod(me-i, b.p)
			if reduce {
				b.recvReduce(w, slo, shi)
			} else {
				wlo, whi := b.block(w)
				b.recv(w, max(slo, wlo), min(shi, whi))
			}
		}
	}
}

// pull appends the servers' replies: each rank r gets shard s ∩ want(r).
func (ps paramServer) pull(b *builder, want func(r int) (int, int)) {
	me := b.rank
	if s := ps.shardOf(b.p, me); s >= 0 {
		slo, shi := ps.shard(b, s)
		for i := 1; i < b.p; i++ {
			r := mod(me+i, b.p)
			wlo, whi := want(r)
			b.send(r, max(slo, wlo), min(shi, whi))
		}
	}
	wlo, whi := want(me)
	for i := 1; i <= b.p; i++ {
		peer := mod(me-i, b.p)
		s := ps.shardOf(b.p, peer)
		if s < 0 || peer == me {
			continue
		}
		slo, shi := ps.shard(b, s)
		b.recv(peer, max(slo, wlo), min(shi, whi))
	}
}

func (ps paramServer) allReduce(b *builder) {
	ps.push(b, true, 0, b.n)
	ps.pull(b, func(int) (int, int) { return 0, b.n })
}

func (ps paramServer) reduceScatter(b *builder) {
	ps.push(b, true, 0, b.n)
	ps.pull(b, b.block)
}

func (ps paramServer) allGather(b *builder) {
	lo, hi := b.block(b.rank)
	ps.push(b, false, lo, hi)
	ps.pull(b, func(int) (int, int) { return 0, b.n })
}
