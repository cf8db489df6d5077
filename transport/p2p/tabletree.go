package p2p

import (
	"context"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// The peer table reaches the ranks down a tree rather than from rank 0 to each: rank 0 answers
// its tableFanout children with the table and every other rank with a short pointer to its
// parent, from which that rank fetches the table once the parent has it. Rank 0 thus sends
// tableFanout copies of the O(p) table and p small pointers, not p copies (p² bytes: about
// half a gigabyte at 1,024 ranks), and no rank sends more than tableFanout copies; the table
// is log_fanout(p) hops deep (4 at 1,024 ranks).
const tableFanout = 8

// tableProto is the protocol a rank speaks to its parent in the tree to fetch the table.
const tableProto = protocol.ID("/hetsync/table/1")

// tableParent is rank r's parent in the tree (r ≥ 1).
func tableParent(r int) int { return (r - 1) / tableFanout }

// tableServer serves this rank's copy of the table to its children in the tree, once it has
// it. Every rank runs one from before it registers, so a child never finds its parent deaf.
type tableServer struct {
	rank  int
	ids   []peer.ID
	ready chan struct{} // closed when table or failure is set
	once  sync.Once
	table peerTable
	done  <-chan struct{} // the join or the endpoint ended: stop waiting
}

func newTableServer(rank int, ids []peer.ID, done <-chan struct{}) *tableServer {
	return &tableServer{rank: rank, ids: ids, ready: make(chan struct{}), done: done}
}

// set gives the server the table (or the refusal) to hand down; later calls are ignored.
func (ts *tableServer) set(t peerTable) {
	ts.once.Do(func() {
		ts.table = t
		close(ts.ready)
	})
}

// handle answers one child's fetch. The gater admitted only the job's ranks; a rank that is
// not a child of this one is refused by name.
func (ts *tableServer) handle(s network.Stream) {
	defer s.Close()
	child := rankOf(ts.ids, s.Conn().RemotePeer())
	if child <= 0 || tableParent(child) != ts.rank {
		_ = writeMsg(s, peerTable{Error: fmt.Sprintf("rank %d asked rank %d for the peer table, but its parent in the table's tree is rank %d",
			child, ts.rank, tableParent(max(child, 1)))})
		return
	}
	select {
	case <-ts.ready:
	case <-ts.done:
		select {
		case <-ts.ready: // both were ready: the table wins
		default:
			_ = writeMsg(s, peerTable{Error: fmt.Sprintf("rank %d stopped before it had the peer table to pass on", ts.rank)})
			return
		}
	}
	_ = writeMsg(s, ts.table)
}

// fetchTable is a rank's side of the tree: rank 0 pointed it at parent (whose table entry
// rank 0 sent along), so it dials the parent and reads the table from it.
func fetchTable(ctx context.Context, cfg Config, h host.Host, ids []peer.ID, parent peerInfo, where string) ([]peerInfo, error) {
	where = fmt.Sprintf("%s: fetching the peer table from rank %d, its parent in the table's tree", where, parent.Rank)
	if parent.Rank < 0 || parent.Rank >= len(ids) || parent.Rank >= cfg.Rank {
		return nil, fmt.Errorf("%s: rank 0 named an impossible parent", where)
	}
	addrs := make([]ma.Multiaddr, 0, len(parent.Addrs))
	for _, a := range parent.Addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("%s: bad address %q: %w", where, a, err)
		}
		addrs = append(addrs, m)
	}
	h.Peerstore().AddAddrs(ids[parent.Rank], addrs, peerstore.PermanentAddrTTL)
	s, err := h.NewStream(network.WithForceDirectDial(ctx, "hetsync peer table"), ids[parent.Rank], tableProto)
	if err != nil {
		return nil, fmt.Errorf("%s (on host %s): %w", where, parent.Hostname, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	var table peerTable
	if err := readMsg(s, &table); err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("%s (on host %s): %w", where, parent.Hostname, err)
	}
	_ = s.Close()
	if err := checkTable(cfg, table); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return table.Peers, nil
}
