package p2p

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// testChannel is the channel of the tests' messages: the transport gives none a meaning.
const testChannel transport.Channel = 16

// linkChannel carries the empty messages with which linkAll makes every pair connect.
const linkChannel transport.Channel = 17

// linksOf is the connection rank ep holds to each peer (nil: none yet).
func linksOf(ep transport.Endpoint) []io.ReadWriteCloser { return ep.(*endpoint).acc.links() }

// linkEveryPeer has ep send an empty message to every other rank and receive one from each,
// so that ep holds a connection to every peer: what a test of the paths or of a failure on a
// given link needs, the endpoints themselves connecting only on first use. Every rank of the
// job must call it.
func linkEveryPeer(ctx context.Context, ep transport.Endpoint) error {
	h := transport.Header{Channel: linkChannel}
	errs := make([]error, 2*ep.Size())
	var wg sync.WaitGroup
	for q := range ep.Size() {
		if q == ep.Rank() {
			continue
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[2*q] = ep.Send(ctx, q, h, nil)
		}()
		go func() {
			defer wg.Done()
			_, errs[2*q+1] = ep.Recv(ctx, q, h, nil)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// linkAll runs linkEveryPeer on every rank of eps.
func linkAll(t testing.TB, eps []transport.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := eachRank(eps, func(ep transport.Endpoint) error { return linkEveryPeer(ctx, ep) }); err != nil {
		t.Fatalf("linking every pair: %v", err)
	}
}

// eachRank runs f on every rank of eps at once, as the ranks of a job do, and joins the errors.
func eachRank(eps []transport.Endpoint, f func(ep transport.Endpoint) error) error {
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(ep)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
