package collective

// paramServer is a synchronous push/pull parameter server used as an allreduce. The vector is
// cut into k shards (Partition(n, k, s)) hosted by ranks 0..k-1 (k = Options.Servers, or p when
// 0: every rank a colocated server). Every rank pushes shard s to server s; server s reduces the
// pushes into its own buffer in a fixed order (rank s+1, s+2, ... mod p) and sends the result
// back to every rank. A server's own contribution never travels. Pushes and pulls start at
// rank+1 and rotate so that the p-1 flows into a server do not all arrive at once.
//
// Reduce-scatter pulls only each rank's Partition block; allgather pushes each rank's Partition
// block to the servers owning it, then pulls as allreduce does.
//
// Cost, k servers: 2α·(per flow) with p-1 concurrent flows; a worker sends and receives n
// (less its own shard), a server receives and sends (p-1)·n/k:
// T ≈ 2(p-1)α + max(n, (p-1)n/k)·2β for a single NIC per rank; colocated (k = p) it moves the
// same 2(p-1)/p·n as the ring in two rounds. It is incast-sensitive, which is why auto never
// picks it; it is for dedicated servers with spare bandwidth (BytePS).
type paramServer struct{ servers int }

func (ps paramServer) k(p int) int {
	if ps.servers <= 0 || ps.servers > p {
		return p
	}
	return ps.servers
}

func (ps paramServer) shard(b *builder, s int) (int, int) { return Partition(b.n, ps.k(b.p), s) }

// push appends the pushes of [lo, hi)-restricted shards and, on servers, their reduction.
func (ps paramServer) push(b *builder, reduce bool, lo, hi int) {
	k, me := ps.k(b.p), b.rank
	for i := 1; i <= b.p; i++ {
		s := mod(me+i, b.p)
		if s >= k || s == me {
			continue
		}
		slo, shi := ps.shard(b, s)
		b.send(s, max(slo, lo), min(shi, hi))
	}
	if me < k {
		slo, shi := ps.shard(b, me)
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
	k, me := ps.k(b.p), b.rank
	if me < k {
		slo, shi := ps.shard(b, me)
		for i := 1; i < b.p; i++ {
			r := mod(me+i, b.p)
			wlo, whi := want(r)
			b.send(r, max(slo, wlo), min(shi, whi))
		}
	}
	wlo, whi := want(me)
	for i := 1; i <= b.p; i++ {
		s := mod(me-i, b.p)
		if s >= k || s == me {
			continue
		}
		slo, shi := ps.shard(b, s)
		b.recv(s, max(slo, wlo), min(shi, whi))
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
