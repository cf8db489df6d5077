package p2p

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/transport"
)

// The job's endpoint lends received payloads like the stream endpoint under it does, so that
// collectives reduce segments straight from the transport's buffers (transport.Borrower).
var _ transport.Borrower = (*endpoint)(nil)

func (e *endpoint) RecvBorrow(ctx context.Context, from int, ch transport.Channel) (transport.Header, []byte, error) {
	b, ok := e.Endpoint.(transport.Borrower)
	if !ok {
		return transport.Header{}, nil, fmt.Errorf("rank %d: recv from rank %d: the endpoint cannot lend payloads", e.cfg.Rank, from)
	}
	return b.RecvBorrow(ctx, from, ch)
}

func (e *endpoint) ReleaseBorrowed(from int, ch transport.Channel) {
	if b, ok := e.Endpoint.(transport.Borrower); ok {
		b.ReleaseBorrowed(from, ch)
	}
}
