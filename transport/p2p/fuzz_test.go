package p2p

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRendezvousMessages feeds any bytes to rank 0's reading of a registration and to a
// rank's reading of the peer table: neither panics, a length prefix cannot claim more memory
// than the bytes that follow, and what the checks accept is a registration of a rank the job
// has, from that rank's peer, or a table with one well-formed entry per rank.
func FuzzRendezvousMessages(f *testing.F) {
	cfg := Config{Size: 3, Secret: "fuzz", Security: SecurityTLS, DataPath: DataPathAuto}
	ids, err := jobIDs(cfg.Secret, cfg.Size)
	if err != nil {
		f.Fatal(err)
	}
	rs := newRendezvousServer(cfg, ids)
	info := func(r int) peerInfo {
		return peerInfo{Rank: r, Size: cfg.Size, Hostname: "h", Addrs: []string{"/ip4/127.0.0.1/tcp/1"},
			Token: make([]byte, tokenLen), Security: cfg.Security, DataPath: cfg.DataPath}
	}
	for _, v := range []any{
		info(1), info(0), info(7),
		peerTable{Peers: []peerInfo{info(0), info(1), info(2)}},
		peerTable{Peers: []peerInfo{info(0), info(2), info(1)}},
		peerTable{Error: "rank 1 registered twice"},
	} {
		var b bytes.Buffer
		if err := writeMsg(&b, v); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	huge := binary.BigEndian.AppendUint32(nil, maxControlMsg)
	f.Add(append(huge, '{'))
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var reg peerInfo
		if readMsg(bytes.NewReader(b), &reg) == nil {
			for r, id := range ids {
				if rs.check(reg, id) == nil && (reg.Rank != r || r == 0 || len(reg.Token) != tokenLen || reg.Size != cfg.Size) {
					t.Fatalf("accepted a registration of rank %d (size %d) from rank %d's peer", reg.Rank, reg.Size, r)
				}
			}
		}
		var table peerTable
		if readMsg(bytes.NewReader(b), &table) == nil && checkTable(cfg, table) == nil {
			if len(table.Peers) != cfg.Size {
				t.Fatalf("accepted a table of %d ranks", len(table.Peers))
			}
			for r, p := range table.Peers {
				if p.Rank != r || len(p.Token) != tokenLen {
					t.Fatalf("accepted a table whose entry %d is rank %d with a %d-byte token", r, p.Rank, len(p.Token))
				}
			}
		}
	})
}
