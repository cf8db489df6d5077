package trainer

import (
	"context"
	"fmt"
)

// How a job starts (Run, before the strategy's Start): after the start barrier (agree.go),
// every rank takes rank 0's parameters, as DDP and Horovod start every replica from rank 0's
// state. Strategies that keep identical replicas (ssgd, esync) need it, and so do the
// parameter-server ones, whose shards start from the model of the rank that hosts them: a
// per-rank initialisation would otherwise train on, with no error, a different model on
// every rank, or a server model stitched from several ranks' shards.

// broadcastParams gives every rank rank 0's parameters, down a binomial tree on the control
// channel: a rank receives them once from its parent and forwards them to at most log2(size)
// children, so no rank sends more than log2(size) copies. The control channel carries the
// bytes exactly, where the communicator's wire codec (fp16, bf16) could round them. The ranks
// agreed on the parameter count first (agreeStart).
func broadcastParams(ctx context.Context, w *Worker) error {
	r, p := w.Rank, w.Size
	mask := 1
	for ; mask < p; mask <<= 1 {
		if r&mask != 0 {
			parent := r - mask
			b, err := recvBlob(ctx, w.Endpoint, parent, ctrlParams, 4*uint64(len(w.Params)))
			if err != nil {
				return fmt.Errorf("trainer: rank %d: receiving rank 0's initial parameters from rank %d: %w", r, parent, err)
			}
			if len(b) != 4*len(w.Params) {
				return fmt.Errorf("trainer: rank %d: rank %d sent %d bytes of initial parameters, want %d", r, parent, len(b), 4*len(w.Params))
			}
			copy(w.Params, readFloats(b))
			break
		}
	}
	var data []byte
	for mask >>= 1; mask > 0; mask >>= 1 {
		child := r + mask
		if child >= p {
			continue
		}
		if data == nil {
			data = appendFloats(make([]byte, 0, 4*len(w.Params)), w.Params)
		}
		if err := sendBlob(ctx, w.Endpoint, child, ctrlParams, data); err != nil {
			return fmt.Errorf("trainer: rank %d: sending rank 0's initial parameters to rank %d: %w", r, child, err)
		}
	}
	return nil
}
