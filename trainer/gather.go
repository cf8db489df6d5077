package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// gatherChunk bounds one control message, well under any transport's frame limit.
const gatherChunk = 1 << 20

// GatherRecords sends every rank's round records to rank 0 over the control channel, so the
// launching host ends with one run directory. Rank 0 returns all records (its own first, then
// rank 1's, ...); the other ranks return nil. Every rank must call it once, after Run.
func GatherRecords(ctx context.Context, ep transport.Endpoint, mine []metrics.RoundRecord) ([]metrics.RoundRecord, error) {
	rank, size := ep.Rank(), ep.Size()
	if rank != 0 {
		var data []byte
		for i := range mine {
			data = append(mine[i].AppendJSON(data), '\n')
		}
		if err := sendBlob(ctx, ep, 0, ctrlMetrics, data); err != nil {
			return nil, fmt.Errorf("trainer: rank %d: sending metrics to rank 0: %w", rank, err)
		}
		return nil, nil
	}
	all := append([]metrics.RoundRecord(nil), mine...)
	for r := 1; r < size; r++ {
		data, err := recvBlob(ctx, ep, r, ctrlMetrics, 1<<34)
		if err != nil {
			return nil, fmt.Errorf("trainer: rank 0: receiving metrics of rank %d: %w", r, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec metrics.RoundRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				return nil, fmt.Errorf("trainer: rank 0: bad metrics line from rank %d: %w", r, err)
			}
			if rec.Rank != r {
				return nil, fmt.Errorf("trainer: rank 0: rank %d sent a record of rank %d", r, rec.Rank)
			}
			all = append(all, rec)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("trainer: rank 0: reading metrics of rank %d: %w", r, err)
		}
	}
	return all, nil
}

// Control-channel message kinds of the trainer (Header.Op), under a magic ("TR").
const (
	ctrlStop    uint32 = 0x54520001
	ctrlMetrics uint32 = 0x54520002
	ctrlStart   uint32 = 0x54520003
	ctrlRunDir  uint32 = 0x54520004
	// A per-rank checkpoint's steps (checkpoint_rank.go).
	ctrlCkptDue       uint32 = 0x54520005
	ctrlCkptWritten   uint32 = 0x54520006
	ctrlCkptCommitted uint32 = 0x54520007
	ctrlCkptPlan      uint32 = 0x54520008
	// The initial parameters, broadcast from rank 0 (start.go).
	ctrlParams uint32 = 0x54520009
)

// sendBlob sends data to peer on the control channel as op: its length, then segments of at
// most gatherChunk bytes, which recvBlob reassembles.
func sendBlob(ctx context.Context, ep transport.Endpoint, peer int, op uint32, data []byte) error {
	h := transport.Header{Channel: transport.ChanControl, Op: op}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	if err := ep.Send(ctx, peer, h, n[:]); err != nil {
		return err
	}
	for seg := uint32(1); len(data) > 0; seg++ {
		c := min(len(data), gatherChunk)
		h.Segment = seg
		if err := ep.Send(ctx, peer, h, data[:c]); err != nil {
			return err
		}
		data = data[c:]
	}
	return nil
}

// recvBlob receives what sendBlob sent from peer as op; a peer that announces more than limit
// bytes is an error, so that a corrupt length cannot make this rank allocate without bound.
func recvBlob(ctx context.Context, ep transport.Endpoint, peer int, op uint32, limit uint64) ([]byte, error) {
	h := transport.Header{Channel: transport.ChanControl, Op: op}
	var n [8]byte
	if _, err := ep.Recv(ctx, peer, h, n[:]); err != nil {
		return nil, err
	}
	total := binary.LittleEndian.Uint64(n[:])
	if total > limit {
		return nil, fmt.Errorf("rank %d announces %d bytes, more than the %d expected", peer, total, limit)
	}
	data := make([]byte, total)
	for off, seg := 0, uint32(1); off < len(data); seg++ {
		h.Segment = seg
		k, err := ep.Recv(ctx, peer, h, data[off:min(len(data), off+gatherChunk)])
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, fmt.Errorf("an empty chunk from rank %d", peer)
		}
		off += k
	}
	return data, nil
}

// controlBarrier returns on every rank once all ranks have entered it: the others report to
// rank 0 on the control channel and rank 0 releases them. what names it in errors.
func controlBarrier(ctx context.Context, ep transport.Endpoint, op uint32, what string) error {
	rank, size := ep.Rank(), ep.Size()
	h := transport.Header{Channel: transport.ChanControl, Op: op}
	var b [1]byte
	if rank != 0 {
		if err := ep.Send(ctx, 0, h, b[:]); err != nil {
			return fmt.Errorf("trainer: rank %d: %s: %w", rank, what, err)
		}
		if _, err := ep.Recv(ctx, 0, h, b[:]); err != nil {
			return fmt.Errorf("trainer: rank %d: %s: %w", rank, what, err)
		}
		return nil
	}
	for r := 1; r < size; r++ {
		if _, err := ep.Recv(ctx, r, h, b[:]); err != nil {
			return fmt.Errorf("trainer: rank 0: %s: waiting for rank %d: %w", what, r, err)
		}
	}
	for r := 1; r < size; r++ {
		if err := ep.Send(ctx, r, h, b[:]); err != nil {
			return fmt.Errorf("trainer: rank 0: %s: releasing rank %d: %w", what, r, err)
		}
	}
	return nil
}
