package service

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
	"github.com/hetsync/hetsync/transport/p2p/p2ptest"
)

// The operations of the test service.
const (
	opAdd  uint8 = iota // reply Arg = request Arg + the server's rank, Body echoed
	opNote              // one-way: the server counts it
	opJoin              // parked until every client has joined (a barrier at the server)
	opNo                // refused
	opHold              // never answered
)

var testOps = []string{"add", "note", "join", "no", "hold"}

// testServer is one rank's handler: it answers add, counts notes, parks joins until all
// clients have joined, refuses no and parks hold for good.
type testServer struct {
	clients int
	held    chan int // a hold arrived from this rank

	mu     sync.Mutex
	notes  map[int]int
	joined []int
	left   []int
}

func (h *testServer) Serve(ctx context.Context, svc *Service, r Request) error {
	switch r.Op {
	case opAdd:
		return svc.Reply(ctx, r.Peer, Msg{Op: opAdd, Arg: r.Arg + uint64(svc.id.rank), Body: r.Body})
	case opNote:
		h.mu.Lock()
		h.notes[r.Peer] += int(r.Arg)
		h.mu.Unlock()
	case opJoin:
		h.mu.Lock()
		h.joined = append(h.joined, r.Peer)
		all := len(h.joined) == h.clients
		h.mu.Unlock()
		if all {
			for _, c := range h.joined {
				if err := svc.Reply(ctx, c, Msg{Op: opJoin, Arg: uint64(len(h.joined))}); err != nil {
					return err
				}
			}
		}
	case opNo:
		return svc.Fail(ctx, r.Peer, opNo, errors.New("not today"))
	case opHold:
		h.held <- r.Peer
	default:
		return fmt.Errorf("unexpected %s", testOps[r.Op])
	}
	return nil
}

func (h *testServer) Left(_ context.Context, _ *Service, peer int) error {
	h.mu.Lock()
	h.left = append(h.left, peer)
	h.mu.Unlock()
	return nil
}

func allRanks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// startAll starts the test service on every endpoint, each rank serving and calling every rank
// (itself included).
func startAll(t *testing.T, eps []transport.Endpoint, name string) ([]*Service, []*testServer) {
	t.Helper()
	svcs := make([]*Service, len(eps))
	hs := make([]*testServer, len(eps))
	for r, ep := range eps {
		hs[r] = &testServer{clients: len(eps), notes: map[int]int{}, held: make(chan int, len(eps))}
		s, err := Start(context.Background(), ep, Spec{Name: name, Ops: testOps, Handler: hs[r],
			Clients: allRanks(len(eps)), Servers: allRanks(len(eps)), MaxBody: 64})
		if err != nil {
			t.Fatal(err)
		}
		svcs[r] = s
	}
	return svcs, hs
}

// eachRank runs f for every rank concurrently and fails the test with each rank's error.
func eachRank(t *testing.T, n int, f func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// exercise runs every kind of exchange of the layer on a job: requests answered at once, one-way
// messages, replies parked until every client asked (a barrier at each server), a refusal,
// then the shutdown, after which every one-way message has been served and every client has
// left every server.
func exercise(t *testing.T, eps []transport.Endpoint) {
	n := len(eps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svcs, hs := startAll(t, eps, "test "+t.Name())
	eachRank(t, n, func(r int) error {
		s := svcs[r]
		for to := range n {
			for i := range 3 {
				body := fmt.Appendf(nil, "%d→%d #%d", r, to, i)
				rep, err := s.Call(ctx, to, Msg{Op: opAdd, Arg: uint64(100 * r), Body: body})
				if err != nil {
					return err
				}
				if rep.Arg != uint64(100*r+to) || string(rep.Body) != string(body) {
					return fmt.Errorf("rank %d: add from rank %d: got %d %q, want %d %q", r, to, rep.Arg, rep.Body, 100*r+to, body)
				}
				rep.Release()
			}
			if err := s.Post(ctx, to, Msg{Op: opNote, Arg: uint64(r + 1)}); err != nil {
				return err
			}
		}
		// A request to every server first, then every reply: the servers answer only once
		// every client has joined.
		for to := range n {
			if err := s.Ask(ctx, to, Msg{Op: opJoin}); err != nil {
				return err
			}
		}
		for to := range n {
			rep, err := s.Wait(ctx, to)
			if err != nil {
				return err
			}
			if rep.Arg != uint64(n) {
				return fmt.Errorf("rank %d: join at rank %d released with %d joined, want %d", r, to, rep.Arg, n)
			}
			rep.Release()
		}
		_, err := s.Call(ctx, (r+1)%n, Msg{Op: opNo})
		var se *Error
		if !errors.As(err, &se) || se.Service != s.Name() || se.Peer != (r+1)%n || se.Op != "no" ||
			!strings.Contains(err.Error(), "not today") {
			return fmt.Errorf("rank %d: a refused request returned %v", r, err)
		}
		return s.Close(ctx)
	})
	for r, s := range svcs {
		for _, p := range s.peers {
			if p != nil && !isClosed(p.dead) {
				t.Errorf("rank %d: the reader of rank %d outlived Close", r, p.rank)
			}
		}
	}
	for r, h := range hs {
		for c := range n {
			if h.notes[c] != c+1 {
				t.Errorf("rank %d served notes %v, want rank c's c+1", r, h.notes)
				break
			}
		}
		if len(h.left) != n {
			t.Errorf("rank %d: clients %v left, want all %d", r, h.left, n)
		}
	}
}

func TestServiceMem(t *testing.T) {
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) { exercise(t, transport.NewMemJob(n)) })
	}
}

func TestServiceP2P(t *testing.T) {
	for n := 1; n <= 9; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eps := p2ptest.JoinLoopback(t, n, p2p.Config{Secret: "service " + t.Name(), Security: p2p.SecurityNone,
				Logger: slog.New(slog.DiscardHandler)}, nil)
			exercise(t, eps)
		})
	}
}

// oneServer starts a job of n ranks in which rank 0 serves ranks 1..n-1 (rank 0 calls nobody).
func oneServer(t *testing.T, eps []transport.Endpoint, name string) ([]*Service, *testServer) {
	t.Helper()
	svcs := make([]*Service, len(eps))
	h := &testServer{clients: len(eps) - 1, notes: map[int]int{}, held: make(chan int, len(eps))}
	for r, ep := range eps {
		spec := Spec{Name: name, Ops: testOps, Servers: []int{0}, MaxBody: 64}
		if r == 0 {
			spec = Spec{Name: name, Ops: testOps, Handler: h, Clients: allRanks(len(eps))[1:], MaxBody: 64}
		}
		s, err := Start(context.Background(), ep, spec)
		if err != nil {
			t.Fatal(err)
		}
		svcs[r] = s
	}
	return svcs, h
}

// A server that stops serving while requests are pending (its Close gave up waiting for the
// clients' bye) fails every pending request with an error naming the service, the server and
// the request, and its clients' services shut down without a hang.
func TestServiceCloseFailsPending(t *testing.T) {
	for _, n := range []int{2, 3, 9} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eps := transport.NewMemJob(n)
			svcs, h := oneServer(t, eps, "pending")
			ctx := context.Background()
			for r := 1; r < n; r++ {
				if err := svcs[r].Ask(ctx, 0, Msg{Op: opHold}); err != nil {
					t.Fatal(err)
				}
			}
			for r := 1; r < n; r++ {
				<-h.held // every request reached the server
			}
			gone, cancel := context.WithCancel(ctx)
			cancel()
			err := svcs[0].Close(gone)
			if err == nil || !strings.Contains(err.Error(), "did not say bye") {
				t.Fatalf("server's Close: %v, want the clients that did not say bye", err)
			}
			eachRank(t, n-1, func(i int) error {
				r := i + 1
				_, err := svcs[r].Wait(ctx, 0)
				var se *Error
				if !errors.As(err, &se) || se.Service != "pending" || se.Peer != 0 || se.Op != "hold request" {
					return fmt.Errorf("rank %d: pending request ended with %v, want an error naming service, server and request", r, err)
				}
				if err := svcs[r].Ask(ctx, 0, Msg{Op: opAdd}); err == nil {
					return fmt.Errorf("rank %d: a request to a server that stopped serving was sent", r)
				}
				return svcs[r].Close(ctx)
			})
		})
	}
}

// A link that fails under a pending request fails it with the service, the peer and the
// request named; the client's Close returns, its readers stopped.
func TestServiceLinkFailure(t *testing.T) {
	eps := transport.NewMemJob(2)
	svcs, h := oneServer(t, eps, "link")
	ctx := context.Background()
	if err := svcs[1].Ask(ctx, 0, Msg{Op: opHold}); err != nil {
		t.Fatal(err)
	}
	<-h.held
	if err := eps[0].Close(); err != nil { // rank 0 ends without closing its service
		t.Fatal(err)
	}
	defer svcs[0].Abort()
	_, err := svcs[1].Wait(ctx, 0)
	var se *Error
	if !errors.As(err, &se) || se.Service != "link" || se.Peer != 0 || se.Op != "hold request" {
		t.Fatalf("pending request ended with %v, want an error naming service, server and request", err)
	}
	if err := svcs[1].Close(ctx); err == nil {
		t.Fatal("Close after a failed link returned no error")
	}
}

// Two services whose names share a channel never talk across: a frame of the one that reaches
// the other stops the receiving rank's service with an error naming it, and the sender's
// pending request fails instead of hanging.
func TestServiceNameClash(t *testing.T) {
	a, b := clashingNames(t)
	eps := transport.NewMemJob(2)
	h := &testServer{clients: 1, notes: map[int]int{}, held: make(chan int, 1)}
	ctx := context.Background()
	srv, err := Start(ctx, eps[0], Spec{Name: a, Ops: testOps, Handler: h, Clients: []int{1}, MaxBody: 64})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Start(ctx, eps[1], Spec{Name: b, Ops: testOps, Servers: []int{0}, MaxBody: 64})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.Call(ctx, 0, Msg{Op: opAdd, Arg: 1})
	if err == nil || !strings.Contains(err.Error(), "service "+b+":") || !strings.Contains(err.Error(), "another service") {
		t.Fatalf("client of %q: %v, want an error naming it and the other service's frame", b, err)
	}
	srv.Abort()
	if err := srv.Err(); err == nil || !strings.Contains(err.Error(), "service "+a+":") || !strings.Contains(err.Error(), "another service") {
		t.Fatalf("server of %q: %v, want an error naming it and the other service's frame", a, err)
	}
	cli.Abort()
}

// clashingNames finds two service names on one channel.
func clashingNames(t *testing.T) (string, string) {
	seen := map[transport.Channel]string{}
	for i := 0; ; i++ {
		name := fmt.Sprint("svc-", i)
		if other, ok := seen[ChannelOf(name)]; ok {
			if tagOf(other) == tagOf(name) {
				t.Fatalf("%q and %q share channel and tag", other, name)
			}
			return other, name
		}
		seen[ChannelOf(name)] = name
	}
}

// The layer's channels stay inside its range, away from the communicator's.
func TestChannelOfRange(t *testing.T) {
	for i := range 10000 {
		if ch := ChannelOf(fmt.Sprint(i)); ch < FirstChannel || ch >= EndChannel {
			t.Fatalf("ChannelOf(%d) = %d, outside [%d, %d)", i, ch, FirstChannel, EndChannel)
		}
	}
}

// Misuse is an error naming the service, the rank and what was asked.
func TestServiceMisuse(t *testing.T) {
	eps := transport.NewMemJob(3)
	ctx := context.Background()
	if _, err := Start(ctx, eps[0], Spec{Name: "m", Ops: testOps, Clients: []int{1}}); err == nil || !strings.Contains(err.Error(), "no handler") {
		t.Fatalf("clients without a handler: %v", err)
	}
	if _, err := Start(ctx, eps[0], Spec{Name: "m", Ops: testOps, Servers: []int{3}}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("server out of range: %v", err)
	}
	if _, err := Start(ctx, eps[0], Spec{Name: "m", Ops: testOps, Servers: []int{1, 1}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("server listed twice: %v", err)
	}
	if _, err := Start(ctx, eps[0], Spec{Name: "m"}); err == nil {
		t.Fatal("a service without operations started")
	}
	svcs, h := oneServer(t, eps, "misuse")
	if err := svcs[1].Ask(ctx, 2, Msg{Op: opAdd}); err == nil || !strings.Contains(err.Error(), "not one of this rank's servers") {
		t.Fatalf("request to a non-server: %v", err)
	}
	if err := svcs[1].Ask(ctx, 0, Msg{Op: opAdd, Flags: 16}); err == nil || !strings.Contains(err.Error(), "flags") {
		t.Fatalf("flags over 4 bits: %v", err)
	}
	if err := svcs[1].Ask(ctx, 0, Msg{Op: opHold}); err != nil {
		t.Fatal(err)
	}
	<-h.held
	if err := svcs[1].Ask(ctx, 0, Msg{Op: opAdd}); err == nil || !strings.Contains(err.Error(), "hold request is still unanswered") {
		t.Fatalf("a second request in flight: %v", err)
	}
	for _, s := range svcs {
		s.Abort()
	}
}

// A mailbox delivers one-way messages in order, large ones in chunks, and a message of an
// unexpected operation is an error naming both operations.
func TestMailbox(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8, 9} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eps := transport.NewMemJob(n)
			ctx := context.Background()
			eachRank(t, n, func(r int) error {
				mb, err := NewMailbox(eps[r], "mail", testOps)
				if err != nil {
					return err
				}
				next := (r + 1) % n
				prev := (r + n - 1) % n
				big := make([]byte, 2*largeChunk+r+1)
				binary.LittleEndian.PutUint64(big, uint64(r))
				if err := mb.SendLarge(ctx, next, opAdd, big); err != nil {
					return err
				}
				if err := mb.Send(ctx, next, Msg{Op: opNote, Arg: uint64(r)}); err != nil {
					return err
				}
				got, err := mb.RecvLarge(ctx, prev, opAdd, 3*largeChunk)
				if err != nil {
					return err
				}
				if len(got) != 2*largeChunk+prev+1 || binary.LittleEndian.Uint64(got) != uint64(prev) {
					return fmt.Errorf("rank %d: %d bytes from rank %d, want %d", r, len(got), prev, 2*largeChunk+prev+1)
				}
				var buf [8]byte
				_, err = mb.Recv(ctx, prev, opJoin, buf[:])
				if err == nil || !strings.Contains(err.Error(), "service mail") || !strings.Contains(err.Error(), "receive join") ||
					!strings.Contains(err.Error(), "got note") {
					return fmt.Errorf("rank %d: an unexpected operation: %v", r, err)
				}
				return nil
			})
		})
	}
}

// A rank that is its peer's client and server, and whose peer finished its shutdown and ended,
// does not take the ended link for a failure while it still waits for another client.
func TestServiceCloseAfterPeerEnded(t *testing.T) {
	eps := transport.NewMemJob(3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Ranks 0 and 1 serve and call each other; rank 2 calls rank 0 only.
	specs := []Spec{
		{Clients: []int{0, 1, 2}, Servers: []int{0, 1}},
		{Clients: []int{0, 1}, Servers: []int{0, 1}},
		{Servers: []int{0}},
	}
	svcs := make([]*Service, 3)
	for r, sp := range specs {
		sp.Name, sp.Ops, sp.MaxBody = "ended", testOps, 64
		if len(sp.Clients) > 0 {
			sp.Handler = &testServer{notes: map[int]int{}}
		}
		s, err := Start(ctx, eps[r], sp)
		if err != nil {
			t.Fatal(err)
		}
		svcs[r] = s
	}
	for _, pair := range [][2]int{{0, 1}, {1, 0}, {2, 0}} {
		rep, err := svcs[pair[0]].Call(ctx, pair[1], Msg{Op: opAdd})
		if err != nil {
			t.Fatal(err)
		}
		rep.Release()
	}
	closed0 := make(chan error, 1)
	go func() { closed0 <- svcs[0].Close(ctx) }()
	if err := svcs[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eps[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := svcs[2].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-closed0; err != nil {
		t.Fatalf("rank 0's Close: %v", err)
	}
}

// A rank that closes its own side while one of its requests is pending (Close from another
// goroutine, or Abort) fails that request with an error naming the service, the server and
// the request, instead of leaving its caller waiting.
func TestServiceOwnCloseFailsPending(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprint("abort=", abort), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			eps := transport.NewMemJob(2)
			svcs, h := oneServer(t, eps, "own")
			if err := svcs[1].Ask(ctx, 0, Msg{Op: opHold}); err != nil {
				t.Fatal(err)
			}
			<-h.held
			if abort {
				svcs[1].Abort()
			} else if err := svcs[1].Close(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := svcs[1].Wait(ctx, 0)
			var se *Error
			if !errors.As(err, &se) || se.Service != "own" || se.Peer != 0 || se.Op != "hold request" {
				t.Fatalf("pending request ended with %v, want an error naming service, server and request", err)
			}
			if err := svcs[0].Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ackWatch is rank 0's endpoint in TestServiceByeAckedBeforeClose: when it sends a bye's
// acknowledgement after the bye already counted (the client's left is closed), it holds the
// send until the service's context ends, which is where Close goes once every client has left.
type ackWatch struct {
	transport.Endpoint
	svc atomic.Pointer[Service]
}

func (a *ackWatch) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if k, _ := unpack(h); k == kindByeAck {
		if s := a.svc.Load(); s != nil && isClosed(s.peers[to].left) {
			<-ctx.Done()
		}
	}
	return a.Endpoint.Send(ctx, to, h, payload)
}

// A server acknowledges a bye before the bye counts toward its Close: otherwise a Close that
// sees its last client leave stops the reader that was about to acknowledge, and the client
// waits for an acknowledgement that never comes.
func TestServiceByeAckedBeforeClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := transport.NewMemJob(2)
	watch := &ackWatch{Endpoint: mem[0]}
	eps := []transport.Endpoint{watch, mem[1]}
	svcs, _ := oneServer(t, eps, "acked")
	watch.svc.Store(svcs[0])
	closed0 := make(chan error, 1)
	go func() { closed0 <- svcs[0].Close(ctx) }()
	if err := svcs[1].Close(ctx); err != nil {
		t.Fatalf("client's Close: %v", err)
	}
	if err := <-closed0; err != nil {
		t.Fatalf("server's Close: %v", err)
	}
}

// TestMailboxRecvAny: RecvAny takes the next message whatever its operation (a protocol whose
// next step depends on what the peer sent), and refuses an operation the service does not
// have, naming the service.
func TestMailboxRecvAny(t *testing.T) {
	eps := transport.NewMemJob(2)
	ctx := context.Background()
	a, err := NewMailbox(eps[0], "any", testOps)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMailbox(eps[1], "any", testOps)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Msg{{Op: opNote, Arg: 7, Body: []byte("x")}, {Op: opAdd, Arg: 8}, {Op: uint8(len(testOps))}} {
		if err := a.Send(ctx, 1, m); err != nil {
			t.Fatal(err)
		}
	}
	var buf [4]byte
	for _, want := range []Msg{{Op: opNote, Arg: 7}, {Op: opAdd, Arg: 8}} {
		got, err := b.RecvAny(ctx, 0, buf[:])
		if err != nil || got.Op != want.Op || got.Arg != want.Arg {
			t.Fatalf("RecvAny = %+v, %v; want op %d arg %d", got, err, want.Op, want.Arg)
		}
	}
	if _, err := b.RecvAny(ctx, 0, buf[:]); err == nil || !strings.Contains(err.Error(), "service any") || !strings.Contains(err.Error(), "operation") {
		t.Fatalf("an unknown operation: %v", err)
	}
}

// A client whose server stopped serving it (its Close gave up waiting for the client's bye)
// and then left the job closes without an error: it says no bye to a server that has gone.
func TestServiceClientCloseAfterServerLeft(t *testing.T) {
	eps := p2ptest.JoinLoopback(t, 2, p2p.Config{Secret: "service " + t.Name(), Security: p2p.SecurityNone,
		Logger: slog.New(slog.DiscardHandler)}, nil)
	svcs, h := oneServer(t, eps, "left")
	ctx := context.Background()
	if err := svcs[1].Ask(ctx, 0, Msg{Op: opHold}); err != nil {
		t.Fatal(err)
	}
	<-h.held
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := svcs[0].Close(gone); err == nil {
		t.Fatal("server's Close with a client still calling returned no error")
	}
	if _, err := svcs[1].Wait(ctx, 0); err == nil {
		t.Fatal("a request pending at a server that stopped serving completed")
	}
	if err := eps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := svcs[1].Close(ctx); err != nil {
		t.Fatalf("client's Close after its server left: %v", err)
	}
}
