package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// GatherRecords sends every rank's round records to rank 0 through the job control, so the
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

// The trainer's job control is a mailbox service (package service): rank 0 and the other
// ranks exchange one-way messages in an order both know (barriers, broadcasts from rank 0,
// gathers to it), each an operation of the service below.
const controlServiceName = "job-control"

// The job control's operations.
const (
	ctrlStop    uint8 = iota // local's stop vote, from rank 0 (local.go)
	ctrlMetrics              // a rank's round records, to rank 0 (GatherRecords)
	ctrlStart                // the start barrier's settings and verdict (agree.go)
	ctrlRunDir               // rank 0's run directory (live.go)
	// A per-rank checkpoint's steps (checkpoint_rank.go).
	ctrlCkptDue
	ctrlCkptWritten
	ctrlCkptCommitted
	ctrlCkptPlan
	ctrlParams // the initial parameters, broadcast from rank 0 (start.go)
)

func controlOps() []string {
	return []string{"stop", "metrics", "start", "run-dir", "checkpoint-due", "checkpoint-written",
		"checkpoint-committed", "checkpoint-plan", "params"}
}

// control is the job control's mailbox on ep.
func control(ep transport.Endpoint) (*service.Mailbox, error) {
	return service.NewMailbox(ep, controlServiceName, controlOps())
}

// controlSend sends body to rank to as job-control operation op.
func controlSend(ctx context.Context, ep transport.Endpoint, to int, op uint8, body []byte) error {
	mb, err := control(ep)
	if err != nil {
		return err
	}
	return mb.Send(ctx, to, service.Msg{Op: op, Body: body})
}

// controlRecv receives job-control operation op from rank from into buf and returns the
// length of its body.
func controlRecv(ctx context.Context, ep transport.Endpoint, from int, op uint8, buf []byte) (int, error) {
	mb, err := control(ep)
	if err != nil {
		return 0, err
	}
	m, err := mb.Recv(ctx, from, op, buf)
	return len(m.Body), err
}

// sendBlob sends data, however long, to peer as job-control operation op; recvBlob receives
// it.
func sendBlob(ctx context.Context, ep transport.Endpoint, peer int, op uint8, data []byte) error {
	mb, err := control(ep)
	if err != nil {
		return err
	}
	return mb.SendLarge(ctx, peer, op, data)
}

// recvBlob receives what sendBlob sent from peer as op; a peer that announces more than limit
// bytes is an error, so that a corrupt length cannot make this rank allocate without bound.
func recvBlob(ctx context.Context, ep transport.Endpoint, peer int, op uint8, limit uint64) ([]byte, error) {
	mb, err := control(ep)
	if err != nil {
		return nil, err
	}
	return mb.RecvLarge(ctx, peer, op, limit)
}

// controlBarrier returns on every rank once all ranks have entered it: the others report to
// rank 0 on the control channel and rank 0 releases them. what names it in errors.
func controlBarrier(ctx context.Context, ep transport.Endpoint, op uint8, what string) error {
	rank, size := ep.Rank(), ep.Size()
	var b [1]byte
	if rank != 0 {
		if err := controlSend(ctx, ep, 0, op, b[:]); err != nil {
			return fmt.Errorf("trainer: rank %d: %s: %w", rank, what, err)
		}
		if _, err := controlRecv(ctx, ep, 0, op, b[:]); err != nil {
			return fmt.Errorf("trainer: rank %d: %s: %w", rank, what, err)
		}
		return nil
	}
	for r := 1; r < size; r++ {
		if _, err := controlRecv(ctx, ep, r, op, b[:]); err != nil {
			return fmt.Errorf("trainer: rank 0: %s: waiting for rank %d: %w", what, r, err)
		}
	}
	for r := 1; r < size; r++ {
		if err := controlSend(ctx, ep, r, op, b[:]); err != nil {
			return fmt.Errorf("trainer: rank 0: %s: releasing rank %d: %w", what, r, err)
		}
	}
	return nil
}
