package trainer

import (
	"context"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// linkCounting is the worker's endpoint decorated to count what the strategy's services send
// (a parameter server's pushes and pulls, ESync's state service, job control) by class of
// link. The communicator's collective calls run over the endpoint under it and count their
// own (collective.Comm.LinkBytes), so nothing is counted twice.
type linkCounting struct {
	transport.Endpoint
	sent *collective.LinkCounter
}

// countLinks decorates ep, the endpoint under the worker's communicator, for the worker.
func countLinks(ep transport.Endpoint, links *topology.Matrix) *linkCounting {
	return &linkCounting{Endpoint: ep, sent: collective.NewLinkCounter(ep, links)}
}

func (e *linkCounting) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	err := e.Endpoint.Send(ctx, to, h, payload)
	if err == nil {
		e.sent.Count(to, len(payload))
	}
	return err
}

func (e *linkCounting) Unwrap() transport.Endpoint { return e.Endpoint }

// linkSent is what w has sent so far by class of link: its communicator's calls (when the
// communicator counts them) and its services' messages (when its endpoint counts them).
func linkSent(w *Worker) metrics.LinkBytes {
	var b collective.LinkBytes
	if c, ok := w.Comm.(interface{ LinkBytes() collective.LinkBytes }); ok {
		b = c.LinkBytes()
	}
	if e, ok := w.Endpoint.(*linkCounting); ok {
		s := e.sent.Bytes()
		for k := range b {
			b[k] += s[k]
		}
	}
	return metrics.LinkBytes{Host: b[collective.LinkHost], Hosts: b[collective.LinkHosts], Groups: b[collective.LinkGroups]}
}
