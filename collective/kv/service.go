package kv

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// The service's operations (service.Msg.Op) and flags (service.Msg.Flags).
const (
	opPush    uint8 = iota
	opPull          // pull without pushing
	opPushPul       // push, then pull
	opPushNew       // push, and pull only the shards published since this worker's last pull

	flagStop  uint8 = 1 << 0 // a request's stop vote; a reply's "training stops"
	flagModel uint8 = 1 << 1 // the reply carries the shard's values

	preamble = 24 // reply preamble: min clock, staleness, clock sum
)

func opNames() []string { return []string{"push", "pull", "push-pull", "push-pull-if-newer"} }

func opName(op uint8) string {
	if names := opNames(); int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("op(%d)", op)
}

// pushes and pulls say whether op carries the worker's vector, and whether it may take the
// shard's values back.
func pushes(op uint8) bool { return op != opPull }
func pulls(op uint8) bool  { return op != opPush }

// Service is one rank's part of the parameter server: its hosted shard (if any) and its
// client, on a service of the service layer. Client calls (Push, Pull, PushPull) must not
// run concurrently with each other.
type Service struct {
	svc      *service.Service
	ep       transport.Endpoint
	rank     int
	size     int
	servers  []int
	shardOf  []int  // rank → shard index, -1 when the rank hosts none
	bounds   []int  // shard i is [bounds[i], bounds[i+1])
	fresh    []bool // per shard: the last call copied its values
	local    *serverShard
	localRel []released // held replies released by this rank's own requests (callLocal)
	callMu   sync.Mutex
}

// Start starts this rank's part of the service. Every rank of the job must call Start with
// the same Len, Servers and Name. ctx bounds the service's whole life: cancelling it aborts
// every reader and pending call.
func Start(ctx context.Context, ep transport.Endpoint, cfg Config) (*Service, error) {
	rank, size := ep.Rank(), ep.Size()
	if err := cfg.Validate(rank, size); err != nil {
		return nil, err
	}
	servers := cfg.Servers
	if len(servers) == 0 {
		servers = []int{0}
	}
	s := &Service{
		ep: ep, rank: rank, size: size,
		servers: append([]int(nil), servers...),
		shardOf: make([]int, size),
		bounds:  make([]int, len(servers)+1),
		fresh:   make([]bool, len(servers)),
	}
	maxShard := 0
	for i := range s.shardOf {
		s.shardOf[i] = -1
	}
	for i, r := range servers {
		lo, hi := split(cfg.Len, len(servers), i)
		s.bounds[i], s.bounds[i+1] = lo, hi
		s.shardOf[r] = i
		maxShard = max(maxShard, hi-lo)
	}
	// A message is at most a full shard plus the reply preamble; refusals carry text.
	bufLen := max(preamble+4*maxShard, 512)
	spec := service.Spec{Name: cfg.Name, Ops: opNames(), Servers: s.servers, MaxBody: bufLen}
	if spec.Name == "" {
		spec.Name = DefaultName
	}
	if i := s.shardOf[rank]; i >= 0 {
		sh, err := newServerShard(rank, size, i, cfg, s.bounds[i], s.bounds[i+1], bufLen)
		if err != nil {
			return nil, err
		}
		s.local = sh
		s.localRel = make([]released, 0, size)
		spec.Handler = s
		for r := range size {
			spec.Clients = append(spec.Clients, r)
		}
	}
	svc, err := service.Start(ctx, ep, spec)
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	s.svc = svc
	return s, nil
}

// Rank is this rank; Servers the ranks hosting shards, in shard order.
func (s *Service) Rank() int      { return s.rank }
func (s *Service) Servers() []int { return append([]int(nil), s.servers...) }

// ShardRange is the part [lo, hi) of the model vector that shard i holds.
func (s *Service) ShardRange(i int) (lo, hi int) { return s.bounds[i], s.bounds[i+1] }

// Err is the first error the service met on this rank, or nil.
func (s *Service) Err() error { return s.svc.Err() }

// split is shard i's range when n values are spread over p shards, the first n mod p shards
// holding one value more (the same rule as collective.Partition).
func split(n, p, i int) (lo, hi int) {
	q, r := n/p, n%p
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

func asF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func asBytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
