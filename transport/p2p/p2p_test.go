package p2p

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

var quiet = slog.New(slog.DiscardHandler)

// lockedBuffer is a log sink that goroutines may write while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type result struct {
	ep  transport.Endpoint
	err error
}

// startRank0 starts rank 0 on a free loopback port and returns the rendezvous address and
// rank 0's eventual result.
func startRank0(t testing.TB, cfg Config) (string, <-chan result) {
	t.Helper()
	return startRank0With(t, cfg, hooks{})
}

// startRank0With is startRank0 with the test hooks hk (its bound hook is startRank0's).
func startRank0With(t testing.TB, cfg Config, hk hooks) (string, <-chan result) {
	t.Helper()
	cfg.Rank = 0
	cfg.Rendezvous = "127.0.0.1:0"
	addrc := make(chan string, 1)
	resc := make(chan result, 1)
	hk.bound = func(a string) { addrc <- a }
	go func() {
		ep, err := join(context.Background(), cfg, &hk)
		resc <- result{ep, err}
	}()
	select {
	case a := <-addrc:
		return a, resc
	case r := <-resc:
		t.Fatalf("rank 0 failed before listening: %v", r.err)
	}
	return "", nil
}

// startRank joins rank r of a job whose rank 0 listens at rendezvous.
func startRank(cfg Config, r int, rendezvous string) <-chan result {
	return startRankWith(cfg, r, rendezvous, nil)
}

// startRankWith is startRank with the test hooks hk (nil: none).
func startRankWith(cfg Config, r int, rendezvous string, hk *hooks) <-chan result {
	cfg.Rank = r
	cfg.Rendezvous = rendezvous
	resc := make(chan result, 1)
	go func() {
		ep, err := join(context.Background(), cfg, hk)
		resc <- result{ep, err}
	}()
	return resc
}

// startJob joins every rank of a job; perRank may change each rank's config.
func startJob(t testing.TB, base Config, perRank func(r int, c *Config)) []transport.Endpoint {
	t.Helper()
	return startJobWith(t, base, perRank, hooks{})
}

// startJobWith is startJob with the test hooks hk on every rank (rank 0's bound hook is
// startRank0's): the job formed (formJobWith), then every pair linked, as the tests of paths,
// failures and heartbeats look at every pair's link.
func startJobWith(t testing.TB, base Config, perRank func(r int, c *Config), hk hooks) []transport.Endpoint {
	t.Helper()
	eps := formJobWith(t, base, perRank, hk)
	linkAll(t, eps)
	return eps
}

// formJobWith joins every rank of a job with the test hooks hk, without linking any pair.
func formJobWith(t testing.TB, base Config, perRank func(r int, c *Config), hk hooks) []transport.Endpoint {
	t.Helper()
	cfgs := make([]Config, base.Size)
	for r := range cfgs {
		cfgs[r] = base
		if perRank != nil {
			perRank(r, &cfgs[r])
		}
	}
	addr, res0 := startRank0With(t, cfgs[0], hk)
	chans := []<-chan result{res0}
	for r := 1; r < base.Size; r++ {
		chans = append(chans, startRankWith(cfgs[r], r, addr, &hk))
	}
	eps := make([]transport.Endpoint, base.Size)
	var errs []error
	for r, c := range chans {
		res := <-c
		eps[r] = res.ep
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	t.Cleanup(func() { closeAll(eps) })
	if len(errs) > 0 {
		t.Fatalf("join failed: %v", errors.Join(errs...))
	}
	return eps
}

func closeAll(eps []transport.Endpoint) { transport.CloseAll(eps) }

func payloadFor(from, to, size int) []byte {
	n := 1 + (7919*(from*size+to))%50000
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*31 + to*7 + i)
	}
	return b
}

// exchangeAll has every rank send a distinct message to every rank (itself included) and
// checks what every rank receives.
func exchangeAll(t *testing.T, eps []transport.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	size := len(eps)
	var wg sync.WaitGroup
	errc := make(chan error, 2*size*size)
	for from, ep := range eps {
		for to := range size {
			wg.Add(2)
			go func() {
				defer wg.Done()
				h := transport.Header{Channel: testChannel, Seq: uint64(100*from + to), Op: 0xabc, Segment: 1}
				if err := ep.Send(ctx, to, h, payloadFor(from, to, size)); err != nil {
					errc <- err
				}
			}()
			go func() {
				defer wg.Done()
				// eps[to] receives from `from`.
				want := payloadFor(from, to, size)
				buf := make([]byte, len(want)+16)
				h := transport.Header{Channel: testChannel, Seq: uint64(100*from + to), Op: 0xabc, Segment: 1}
				n, err := eps[to].Recv(ctx, from, h, buf)
				if err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(buf[:n], want) {
					errc <- fmt.Errorf("rank %d got a wrong message from rank %d (%d bytes, want %d)", to, from, n, len(want))
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// twoHosts puts even ranks on one host and odd ranks on another, as far as Hostname tells.
func twoHosts(r int, c *Config) { c.Hostname = fmt.Sprintf("host-%d", r%2) }

func TestJoinAndExchange(t *testing.T) {
	cases := []struct {
		name     string
		security string
		dataPath string
		perRank  func(r int, c *Config)
	}{
		{"stream/tls", SecurityTLS, DataPathStream, nil},
		{"stream/none", SecurityNone, DataPathStream, nil},
		{"tcp/tls", SecurityTLS, DataPathTCP, nil},
		{"tcp/none", SecurityNone, DataPathTCP, nil},
		{"tls/tls", SecurityTLS, DataPathTLS, nil},
		{"tls/none", SecurityNone, DataPathTLS, nil},
		{"unix/tls", SecurityTLS, DataPathUnix, nil},
		{"unix/none", SecurityNone, DataPathUnix, nil},
		{"shm/tls", SecurityTLS, DataPathShm, nil},
		{"shm/none", SecurityNone, DataPathShm, nil},
		{"auto/tls/one-host", SecurityTLS, DataPathAuto, nil},
		{"auto/tls/two-hosts", SecurityTLS, DataPathAuto, twoHosts},
		{"auto/none/two-hosts", SecurityNone, DataPathAuto, twoHosts},
		{"default/default", "", "", nil},
	}
	for _, tc := range cases {
		for size := 1; size <= 5; size++ {
			t.Run(fmt.Sprintf("%s/np%d", tc.name, size), func(t *testing.T) {
				base := Config{Size: size, Secret: "secret " + t.Name(), Security: tc.security,
					DataPath: tc.dataPath, JoinTimeout: 30 * time.Second, Logger: quiet}
				eps := startJob(t, base, tc.perRank)
				for r, ep := range eps {
					if ep.Rank() != r || ep.Size() != size {
						t.Fatalf("endpoint %d says rank %d of %d", r, ep.Rank(), ep.Size())
					}
				}
				checkPaths(t, eps)
				exchangeAll(t, eps)
			})
		}
	}
}

// checkPaths checks that every pair of ranks talks over the connection type its data path
// calls for, so that no silent fallback passes for the path under test.
func checkPaths(t *testing.T, eps []transport.Endpoint) {
	t.Helper()
	for r, ep := range eps {
		e := ep.(*endpoint)
		for peer, c := range linksOf(e) {
			if peer == r {
				continue
			}
			got := connPath(c)
			if a, b := e.SameHost()[peer], eps[peer].(*endpoint).SameHost()[r]; a != b {
				t.Errorf("rank %d says it shares a host with rank %d: %v; rank %d says %v", r, peer, a, peer, b)
			}
			cfg := e.cfg
			want, err := pathFor(cfg, peerInfo{Rank: r}, peerInfo{Rank: peer}, e.local[peer])
			if err != nil || got != want {
				t.Errorf("rank %d to rank %d: connection is %s, want %s (%v)", r, peer, got, want, err)
			}
		}
	}
}

// connPath names the data path a connection belongs to.
func connPath(c io.ReadWriteCloser) string {
	switch c.(type) {
	case *net.TCPConn:
		return DataPathTCP
	case *secureConn:
		return DataPathTLS
	case *net.UnixConn:
		return DataPathUnix
	case *shm.Pipe:
		return DataPathShm
	case network.Stream:
		return DataPathStream
	}
	return fmt.Sprintf("%T", c)
}

// TestDataPathChoice checks which path the pair of ranks uses, per configuration.
func TestDataPathChoice(t *testing.T) {
	x := peerInfo{Rank: 0, Hostname: "a"}
	y := peerInfo{Rank: 1, Hostname: "a"}
	one := locality{same: true}
	two := locality{why: "the reason"}
	cases := []struct {
		dataPath, security string
		loc                locality
		want               string
		wantErr            bool
	}{
		{DataPathAuto, SecurityTLS, one, DataPathShm, false},
		{DataPathAuto, SecurityNone, one, DataPathShm, false},
		{DataPathAuto, SecurityTLS, two, DataPathTLS, false},
		{DataPathAuto, SecurityNone, two, DataPathTCP, false},
		{DataPathStream, SecurityNone, one, DataPathStream, false},
		{DataPathTCP, SecurityTLS, one, DataPathTCP, false},
		{DataPathTLS, SecurityTLS, two, DataPathTLS, false},
		{DataPathTLS, SecurityNone, one, DataPathTLS, false},
		{DataPathUnix, SecurityTLS, one, DataPathUnix, false},
		{DataPathUnix, SecurityTLS, two, "", true},
		{DataPathShm, SecurityTLS, one, DataPathShm, false},
		{DataPathShm, SecurityNone, one, DataPathShm, false},
		{DataPathShm, SecurityNone, two, "", true},
	}
	for _, tc := range cases {
		got, err := pathFor(Config{DataPath: tc.dataPath, Security: tc.security}, x, y, tc.loc)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("pathFor(%s, %s, same host %v) = %q, %v; want %q (error %v)",
				tc.dataPath, tc.security, tc.loc.same, got, err, tc.want, tc.wantErr)
		}
		// A refused pair is named: both ranks, the path and why.
		if err != nil {
			for _, w := range []string{"rank 0 (host", "rank 1 (host", tc.dataPath, "the reason"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("pathFor(%s, different hosts): error %q does not name %s", tc.dataPath, err, w)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	good := Config{Rank: 1, Size: 2, Rendezvous: "10.0.0.1:29500", Secret: "s"}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"size", func(c *Config) { c.Size = 0 }, "Size 0"},
		{"rank high", func(c *Config) { c.Rank = 2 }, "Rank 2 out of range"},
		{"rank negative", func(c *Config) { c.Rank = -1 }, "Rank -1 out of range"},
		{"local rank", func(c *Config) { c.LocalRank = -1 }, "LocalRank"},
		{"secret", func(c *Config) { c.Secret = "" }, "HETSYNC_JOB_SECRET"},
		{"rendezvous empty", func(c *Config) { c.Rendezvous = "" }, "Rendezvous is empty"},
		{"rendezvous no port", func(c *Config) { c.Rendezvous = "10.0.0.1" }, "Rendezvous \"10.0.0.1\""},
		{"rendezvous bad port", func(c *Config) { c.Rendezvous = "h:x" }, "port \"x\""},
		{"rendezvous no host", func(c *Config) { c.Rendezvous = ":29500" }, "has no host"},
		{"security", func(c *Config) { c.Security = "noise" }, "Security \"noise\" unknown"},
		{"data path", func(c *Config) { c.DataPath = "rdma" }, "DataPath \"rdma\" unknown"},
		{"host", func(c *Config) { c.Host = "example" }, "Host \"example\" is not an IP"},
		{"host unspecified", func(c *Config) { c.Host = "0.0.0.0" }, "unspecified"},
		{"timeout", func(c *Config) { c.JoinTimeout = -time.Second }, "JoinTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if _, jerr := Join(context.Background(), c); jerr == nil || jerr.Error() != err.Error() {
				t.Fatalf("Join() = %v, want the validation error %v", jerr, err)
			}
		})
	}
}

func TestIdentityIsDeterministic(t *testing.T) {
	a, err := jobIDs("s1", 4)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := jobIDs("s1", 4)
	c, _ := jobIDs("s2", 4)
	seen := map[peer.ID]bool{}
	for r := range a {
		if a[r] != b[r] {
			t.Errorf("rank %d: IDs from one secret differ: %s, %s", r, a[r], b[r])
		}
		if a[r] == c[r] {
			t.Errorf("rank %d: two secrets give the same ID %s", r, a[r])
		}
		if seen[a[r]] {
			t.Errorf("rank %d: ID %s repeats", r, a[r])
		}
		seen[a[r]] = true
	}
}

// TestWrongSecret: a rank with a wrong secret fails promptly with a clear error, and rank 0
// keeps waiting for the real rank, which then completes the job.
func TestWrongSecret(t *testing.T) {
	for _, security := range []string{SecurityTLS, SecurityNone} {
		t.Run(security, func(t *testing.T) {
			base := Config{Size: 3, Secret: "right", Security: security, DataPath: DataPathStream,
				JoinTimeout: 30 * time.Second, Logger: quiet}
			addr, res0 := startRank0(t, base)
			res1 := startRank(base, 1, addr)

			bad := base
			bad.Secret = "wrong"
			r := <-startRank(bad, 2, addr)
			if r.err == nil {
				r.ep.Close()
				t.Fatal("rank 2 with a wrong secret joined")
			}
			want := fmt.Sprintf("rank 2: cannot join rank 0 at %s: peer identity does not match the job (wrong HETSYNC_JOB_SECRET?)", addr)
			if r.err.Error() != want || !errors.Is(r.err, ErrWrongJob) {
				t.Fatalf("wrong secret:\n got  %v\n want %s (wrapping ErrWrongJob)", r.err, want)
			}

			res2 := startRank(base, 2, addr)
			eps := make([]transport.Endpoint, 3)
			for i, c := range []<-chan result{res0, res1, res2} {
				r := <-c
				if r.err != nil {
					t.Errorf("rank %d: %v", i, r.err)
				}
				eps[i] = r.ep
			}
			defer closeAll(eps)
			if t.Failed() {
				return
			}
			exchangeAll(t, eps)
		})
	}
}

// TestRendezvousTimeout: when rank 0 stops waiting, it names the ranks that never came and
// tells the ones that did. (The wait ends by cancellation here, so that the test does not
// depend on how fast a loaded machine starts rank 2; JoinTimeout takes the same path, see
// TestNoRank0 for a JoinTimeout expiring.)
func TestRendezvousTimeout(t *testing.T) {
	base := Config{Size: 4, Secret: "timeout", JoinTimeout: 60 * time.Second, Logger: quiet}
	base.Rendezvous = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	res0 := make(chan result, 1)
	go func() {
		ep, err := join(ctx, base, &hooks{
			bound: func(a string) { addrc <- a },
			registered: func(r int) {
				if r == 2 {
					cancel()
				}
			},
		})
		res0 <- result{ep, err}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case r := <-res0:
		t.Fatalf("rank 0 failed before listening: %v", r.err)
	}
	res2 := startRank(base, 2, addr)
	r0, r2 := <-res0, <-res2
	if r0.err == nil || r2.err == nil {
		closeAll([]transport.Endpoint{r0.ep, r2.ep})
		t.Fatalf("incomplete job joined: rank 0: %v, rank 2: %v", r0.err, r2.err)
	}
	for i, err := range []error{r0.err, r2.err} {
		if !strings.Contains(err.Error(), "2 of 4 ranks joined; still missing rank(s) 1, 3") {
			t.Errorf("rank %d error does not name the missing ranks: %v", []int{0, 2}[i], err)
		}
	}
	if !strings.HasPrefix(r2.err.Error(), "rank 2: cannot join rank 0 at "+addr+": rank 0 refused: ") {
		t.Errorf("rank 2 error: %v", r2.err)
	}
}

// TestNoRank0: a rank whose rank 0 never starts gives up at its timeout, saying where it dialed.
func TestNoRank0(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg := Config{Rank: 1, Size: 2, Secret: "s", Rendezvous: addr, JoinTimeout: 500 * time.Millisecond, Logger: quiet}
	_, err = Join(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "rank 1: cannot join rank 0 at "+addr+": gave up after 500ms (the join timeout") {
		t.Fatalf("Join = %v", err)
	}
}

// TestMismatchedSize: a rank that disagrees about the job size fails the rendezvous on both sides.
func TestMismatchedSize(t *testing.T) {
	base := Config{Size: 3, Secret: "size", JoinTimeout: 20 * time.Second, Logger: quiet}
	addr, res0 := startRank0(t, base)
	other := base
	other.Size = 4
	r1 := <-startRank(other, 1, addr)
	r0 := <-res0
	closeAll([]transport.Endpoint{r0.ep, r1.ep})
	if r0.err == nil || !strings.Contains(r0.err.Error(), "rank 1 has Size 4, rank 0 has 3") {
		t.Errorf("rank 0: %v", r0.err)
	}
	if r1.err == nil || !strings.Contains(r1.err.Error(), "rank 0 refused: rank 0: rendezvous at "+addr+": rank 1 has Size 4") {
		t.Errorf("rank 1: %v", r1.err)
	}
}

// TestForeignPeerRefused: a libp2p host with another job's identity cannot connect to a rank,
// even when it knows the rank's address and peer ID.
func TestForeignPeerRefused(t *testing.T) {
	for _, security := range []string{SecurityTLS, SecurityNone} {
		t.Run(security, func(t *testing.T) {
			base := Config{Size: 2, Secret: "members", Security: security, DataPath: DataPathStream,
				JoinTimeout: 20 * time.Second, Logger: quiet}
			eps := startJob(t, base, nil)
			target := eps[1].(*endpoint).host

			sk, err := rankKey("outsider", 0)
			if err != nil {
				t.Fatal(err)
			}
			ids, _ := jobIDs("outsider", 1)
			foreign, err := newHost(sk, mustTCPMultiaddr(t), security, newMemberGater([]peer.ID{target.ID(), ids[0]}))
			if err != nil {
				t.Fatal(err)
			}
			defer foreign.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = foreign.Connect(ctx, peer.AddrInfo{ID: target.ID(), Addrs: target.Network().ListenAddresses()})
			if err == nil {
				// The TLS client may finish its handshake before the server refuses it; then the
				// first stream must fail and the rank must hold no connection to the outsider.
				s, serr := foreign.NewStream(ctx, target.ID(), dataProto)
				if serr == nil {
					_, serr = s.Read(make([]byte, 1))
					s.Reset()
				}
				if serr == nil {
					t.Fatal("the outsider opened a stream to a rank")
				}
			}
			for _, c := range target.Network().Conns() {
				if c.RemotePeer() == ids[0] {
					t.Fatalf("rank 1 holds a connection from the outsider %s", ids[0])
				}
			}
			if target.Network().Connectedness(ids[0]) == network.Connected {
				t.Fatal("rank 1 is connected to the outsider")
			}
			if n := eps[1].(*endpoint).gater.refused.Load(); n == 0 {
				t.Fatal("rank 1's gater refused nothing; the outsider was stopped by something else")
			}
		})
	}
}

func mustTCPMultiaddr(t *testing.T) ma.Multiaddr {
	t.Helper()
	a, err := tcpMultiaddr(net.IPv4(127, 0, 0, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testAcceptor is rank 2 of 3's direct-path acceptor for the job named secret, with token
// 7…7 and its log captured in logs.
func testAcceptor(secret string) (logs *lockedBuffer, tag jobTag, token []byte, acc *acceptor) {
	logs = &lockedBuffer{}
	cfg := Config{Rank: 2, Size: 3, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	tag = newJobTag(secret)
	token = bytes.Repeat([]byte{7}, tokenLen)
	return logs, tag, token, newAcceptor(cfg, tag, token, nil, nil)
}

// TestHelloAuthentication drives a rank's direct-path listener with good and bad hellos: bad
// ones are refused and logged with the dialing address, and the listener keeps serving.
func TestHelloAuthentication(t *testing.T) {
	logs, tag, token, acc := testAcceptor("hello")
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	acc.serve(l)
	defer acc.stop(true)

	badToken := bytes.Repeat([]byte{8}, tokenLen)
	garbage := bytes.Repeat([]byte("x"), helloLen)
	cases := []struct {
		name  string
		hello []byte
		want  byte
	}{
		{"garbage", garbage, helloBadMagic},
		{"bad token", encodeHello(tag, 0, 2, badToken), helloBadToken},
		{"other job", encodeHello(newJobTag("other"), 0, 2, token), helloWrongJob},
		{"wrong target", encodeHello(tag, 0, 1, token), helloWrongTarget},
		{"itself as the dialer", encodeHello(tag, 2, 2, token), helloBadFrom},
		{"good rank 0", encodeHello(tag, 0, 2, token), helloOK},
		{"duplicate rank 0", encodeHello(tag, 0, 2, token), helloDuplicate},
		{"good rank 1", encodeHello(tag, 1, 2, token), helloOK},
		{"after all joined", encodeHello(tag, 1, 2, token), helloDuplicate},
	}
	var keep []net.Conn
	defer func() {
		for _, c := range keep {
			c.Close()
		}
	}()
	for _, tc := range cases {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("%s: dial: %v", tc.name, err)
		}
		keep = append(keep, c)
		checkHelloReply(t, c, tc.name, tc.hello, tc.want)
		if tc.want != helloOK {
			// The listener closes a refused connection.
			var r [1]byte
			if n, err := c.Read(r[:]); err != io.EOF {
				t.Errorf("%s: refused connection still open: read %d, %v", tc.name, n, err)
			}
			if !strings.Contains(logs.String(), c.LocalAddr().String()) {
				t.Errorf("%s: the refusal is not logged with the dialing address %s:\n%s", tc.name, c.LocalAddr(), logs.String())
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errors.Join(acc.await(ctx, 0), acc.await(ctx, 1)); err != nil {
		t.Fatalf("the acceptor did not collect ranks 0 and 1: %v", err)
	}
	if !strings.Contains(logs.String(), "bad token") {
		t.Errorf("log does not give the reason:\n%s", logs.String())
	}
}

// TestDialerReportsRefusal: the dialing side turns a refused hello into an error naming both
// ranks and the reason.
func TestDialerReportsRefusal(t *testing.T) {
	cfg := Config{Rank: 1, Size: 2, Logger: quiet}
	tag := newJobTag("dialer")
	acc := newAcceptor(cfg, tag, bytes.Repeat([]byte{1}, tokenLen), nil, nil)
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	acc.serve(l)
	defer acc.stop(true)
	d := &dialer{cfg: Config{Rank: 0, Size: 2, DataPath: DataPathTCP, Logger: quiet}, tag: tag,
		peers: []peerInfo{{Rank: 0}, {Rank: 1, TCP: l.Addr().String(), Token: bytes.Repeat([]byte{2}, tokenLen)}},
		local: []locality{{same: true}, {same: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = d.dial(ctx, 1)
	if err == nil || err.Error() != "rank 0: tcp data connection to rank 1: refused: bad token" {
		t.Fatalf("dial with a bad token: %v", err)
	}
}

// TestCloseReleasesEverything: after Close no goroutine of the job and no socket file remains.
func TestCloseReleasesEverything(t *testing.T) {
	run := func(dataPath string) {
		base := Config{Size: 3, Secret: "close " + dataPath, DataPath: dataPath, Security: SecurityNone,
			JoinTimeout: 20 * time.Second, Logger: quiet}
		addr, res0 := startRank0(t, base)
		chans := []<-chan result{res0, startRank(base, 1, addr), startRank(base, 2, addr)}
		eps := make([]transport.Endpoint, 3)
		for r, c := range chans {
			res := <-c
			if res.err != nil {
				t.Fatalf("rank %d: %v", r, res.err)
			}
			eps[r] = res.ep
		}
		exchangeAll(t, eps)
		tag := newJobTag(base.Secret)
		if err := transport.CloseAll(eps); err != nil {
			t.Errorf("close: %v", err)
		}
		for r := range eps {
			if _, err := os.Stat(unixSocketPath(tag, r)); !os.IsNotExist(err) {
				t.Errorf("rank %d: socket file %s left after close: %v", r, unixSocketPath(tag, r), err)
			}
		}
		checkNoProofFiles(t, tag)
	}
	// A first job starts the process-wide goroutines that libp2p keeps for good.
	run(DataPathStream)
	before := runtime.NumGoroutine()
	for _, p := range []string{DataPathStream, DataPathTCP, DataPathTLS, DataPathUnix, DataPathShm} {
		run(p)
	}
	// Failed joins tear down what they built: a wrong secret, and a rank 0 that gives up.
	base := Config{Size: 2, Secret: "close failed", DataPath: DataPathAuto, JoinTimeout: time.Second, Logger: quiet}
	addr, res0 := startRank0(t, base)
	bad := base
	bad.Secret = "other"
	if r := <-startRank(bad, 1, addr); r.err == nil {
		t.Fatal("a rank with a wrong secret joined")
	}
	if r := <-res0; r.err == nil {
		t.Fatal("rank 0 of an incomplete job joined")
	}
	checkNoProofFiles(t, newJobTag(base.Secret))
	checkNoProofFiles(t, newJobTag(bad.Secret))
	// Goroutines of closed hosts wind down asynchronously; wait for them, bounded only against
	// a leak (a loaded machine may take seconds to run them to their end).
	var now int
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		if now = runtime.NumGoroutine(); now <= before {
			return
		}
	}
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	t.Fatalf("%d goroutines before, %d after three jobs and two failed joins:\n%s", before, now, buf[:n])
}

// BenchmarkThroughput moves 16 MiB messages from rank 0 to rank 1 of a two-rank job over
// each data path. Go reports MB/s; divide by 1000 for GB/s.
func BenchmarkThroughput(b *testing.B) {
	const msg = 16 << 20
	noCRC := transport.DefaultStreamOptions()
	noCRC.Checksum = false
	cases := []struct {
		name, dataPath, security string
		stream                   transport.StreamOptions
	}{
		{"stream+tls", DataPathStream, SecurityTLS, transport.StreamOptions{}},
		{"stream+none", DataPathStream, SecurityNone, transport.StreamOptions{}},
		{"tcp", DataPathTCP, SecurityNone, transport.StreamOptions{}},
		{"tls", DataPathTLS, SecurityNone, transport.StreamOptions{}},
		{"unix", DataPathUnix, SecurityNone, transport.StreamOptions{}},
		// The same without the frames' payload CRC, to show what it costs.
		{"stream+tls/nocrc", DataPathStream, SecurityTLS, noCRC},
		{"tcp/nocrc", DataPathTCP, SecurityNone, noCRC},
		{"tls/nocrc", DataPathTLS, SecurityNone, noCRC},
		{"unix/nocrc", DataPathUnix, SecurityNone, noCRC},
		{"shm/nocrc", DataPathShm, SecurityNone, noCRC},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			base := Config{Size: 2, Secret: "bench " + tc.name, DataPath: tc.dataPath, Security: tc.security,
				Stream: tc.stream, JoinTimeout: 30 * time.Second, Logger: quiet}
			eps := startJob(b, base, nil)
			ctx := context.Background()
			src := make([]byte, msg)
			for i := range src {
				src[i] = byte(i * 13)
			}
			dst := make([]byte, msg)
			h := transport.Header{Channel: testChannel, Op: 1}
			b.SetBytes(msg)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			errc := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					if err := eps[0].Send(ctx, 1, h, src); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := 0; i < b.N; i++ {
				if _, err := eps[1].Recv(ctx, 0, h, dst); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// CPU of sender and receiver together (one process): far less sensitive than the
			// wall-clock rate to other work on a shared machine.
			if cpu := (cpuTime(b) - cpu0).Seconds(); cpu > 0 {
				b.ReportMetric(float64(b.N)*msg/1e9/cpu, "GB/cpu-s")
			}
			if !bytes.Equal(dst, src) {
				b.Fatal("received bytes differ from the sent ones")
			}
		})
	}
}

// TestDuplicateRank: two processes claiming one rank fail the job, and both are told why.
func TestDuplicateRank(t *testing.T) {
	base := Config{Size: 3, Secret: "dup", DataPath: DataPathStream, JoinTimeout: 20 * time.Second, Logger: quiet}
	addr, res0 := startRank0(t, base)
	a := startRank(base, 2, addr)
	b := startRank(base, 2, addr)
	r0, ra, rb := <-res0, <-a, <-b
	closeAll([]transport.Endpoint{r0.ep, ra.ep, rb.ep})
	if r0.err == nil || !strings.Contains(r0.err.Error(), "rank 2 registered twice") {
		t.Errorf("rank 0: %v", r0.err)
	}
	for i, r := range []result{ra, rb} {
		if r.err == nil || !strings.Contains(r.err.Error(), "rank 2 registered twice") {
			t.Errorf("rank 2 (%d): %v", i, r.err)
		}
	}
}

// TestRankBeyondRank0Size: a rank that rank 0's job does not have (rank 3 of 4 against a job of
// 3) is refused by rank 0's gater; it fails rather than waiting for its timeout.
func TestRankBeyondRank0Size(t *testing.T) {
	for _, security := range []string{SecurityTLS, SecurityNone} {
		t.Run(security, func(t *testing.T) {
			base := Config{Size: 3, Secret: "beyond", Security: security, JoinTimeout: 20 * time.Second, Logger: quiet}
			addr, res0 := startRank0(t, base)
			other := base
			other.Size = 4
			r3 := <-startRank(other, 3, addr)
			if r3.err == nil {
				r3.ep.Close()
				t.Fatal("rank 3 joined a job of 3")
			}
			t.Log(r3.err)
			if !strings.HasPrefix(r3.err.Error(), "rank 3: cannot join rank 0 at "+addr+": ") {
				t.Errorf("rank 3: %v", r3.err)
			}
			// Rank 0 is unharmed and still waiting for its ranks 1 and 2.
			c1, c2 := startRank(base, 1, addr), startRank(base, 2, addr)
			eps := make([]transport.Endpoint, 3)
			for r, c := range []<-chan result{res0, c1, c2} {
				res := <-c
				if res.err != nil {
					t.Errorf("rank %d: %v", r, res.err)
				}
				eps[r] = res.ep
			}
			closeAll(eps)
		})
	}
}

// cpuTime is the user+system CPU time of this process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestShmAllReduce runs a 4-rank job over shared memory and checks allreduce, with every
// algorithm, against a reference sum: sizes below a frame, around a segment and well beyond
// the 2 MiB rings (writes larger than a ring stream through it).
func TestShmAllReduce(t *testing.T) {
	base := Config{Size: 4, Secret: "shm allreduce", DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	eps := startJob(t, base, nil)
	checkPaths(t, eps)
	checkAllReduce(t, eps)
}

// checkAllReduce runs allreduce with every algorithm over eps, a job's endpoints, and checks
// every rank's result against a reference sum.
func checkAllReduce(t *testing.T, eps []transport.Endpoint) {
	t.Helper()
	checkAllReduceOf(t, eps, []string{"ring", "butterfly", "binary-blocks", "ps", "auto"}, []int{1, 1000, 300 << 10, 3 << 20})
}

// checkAllReduceOf is checkAllReduce with the algorithms algs on buffers of each length in sizes.
func checkAllReduceOf(t *testing.T, eps []transport.Endpoint, algs []string, sizes []int) {
	t.Helper()
	p := len(eps)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, alg := range algs {
		comms := make([]*collective.Comm, p)
		for r, ep := range eps {
			c, err := collective.New(ep, collective.Options{Algorithm: alg})
			if err != nil {
				t.Fatalf("%s: rank %d: %v", alg, r, err)
			}
			comms[r] = c
		}
		for _, n := range sizes {
			bufs := make([][]float32, p)
			for r := range bufs {
				bufs[r] = make([]float32, n)
				for i := range bufs[r] {
					bufs[r][i] = float32((r + 1) * (i%251 + 1))
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, p)
			for r := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = comms[r].AllReduce(ctx, collective.F32(bufs[r]), collective.Sum)
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s, %d floats: %v", alg, n, err)
			}
			for r := range bufs {
				for i, v := range bufs[r] {
					if want := float32(p * (p + 1) / 2 * (i%251 + 1)); v != want {
						t.Fatalf("%s, %d floats: rank %d element %d = %v, want %v", alg, n, r, i, v, want)
					}
				}
			}
		}
	}
}

// writePartialFrame writes, on rank r's raw data connection to rank `to` (beneath its
// framing), the header of a 1 MiB frame and only the first 1000 bytes of its payload: a peer
// stopped mid-message.
func writePartialFrame(ep transport.Endpoint, to int) error {
	var hdr [transport.FrameHeaderSize]byte
	f := transport.FrameHeader{Header: partialHeader, RawLen: 1 << 20, WireLen: 1 << 20}
	transport.MarshalFrameHeader(hdr[:], &f, crc32.MakeTable(crc32.Castagnoli))
	conn := linksOf(ep)[to]
	if _, err := conn.Write(hdr[:]); err != nil {
		return err
	}
	_, err := conn.Write(make([]byte, 1000))
	return err
}

var partialHeader = transport.Header{Channel: testChannel, Seq: 1, Op: 0x5eed}

// TestPeerClosesMidFrame: a rank whose peer closes its endpoint in the middle of a frame gets
// an error naming the peer, not a hang, on every data path.
func TestPeerClosesMidFrame(t *testing.T) {
	for _, tc := range []struct{ path, security string }{
		{DataPathShm, SecurityNone}, {DataPathUnix, SecurityNone}, {DataPathTCP, SecurityNone},
		{DataPathTLS, SecurityNone}, {DataPathStream, SecurityTLS},
	} {
		t.Run(tc.path, func(t *testing.T) {
			base := Config{Size: 2, Secret: "close mid-frame " + tc.path, DataPath: tc.path, Security: tc.security,
				JoinTimeout: 30 * time.Second, Logger: quiet}
			eps := startJob(t, base, nil)
			if got := connPath(linksOf(eps[1])[0]); got != tc.path {
				t.Fatalf("rank 1's connection to rank 0 is %s, want %s", got, tc.path)
			}
			if err := writePartialFrame(eps[1], 0); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := eps[0].Recv(ctx, 1, partialHeader, make([]byte, 1<<20))
				errc <- err
			}()
			// rank 1's Close half-closes at once, then lingers until rank 0 closes too (or
			// DefaultLinger): rank 0 takes its error first and then closes, as a job's ranks do
			closed := make(chan error, 1)
			go func() { closed <- eps[1].Close() }()
			err := <-errc
			var pe *transport.PeerError
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 ||
				!errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Recv from a peer that closed mid-frame: %v; want a truncated-stream *PeerError of rank 0 naming rank 1", err)
			}
			t.Log(err)
			if err := eps[0].Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPeerKilledMidFrame: rank 1 runs in a child process that writes half a frame and is
// then killed (SIGKILL, so nothing is closed): rank 0's Recv fails with an error naming rank 1,
// on a shared-memory pipe (whose peer is seen gone) and on a TCP connection (which the
// kernel ends).
// startKilledChild joins rank 0 of base (two ranks) here and rank 1 in a child process
// (killedChild) over path; the child and rank 0's endpoint end with the test. It returns
// rank 0's join, the child, its stdout and its stderr.
func startKilledChild(t *testing.T, base Config, path string) (result, *exec.Cmd, io.Reader, *lockedBuffer) {
	t.Helper()
	addr, res0 := startRank0(t, base)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HETSYNC_P2P_CHILD="+addr, "HETSYNC_P2P_CHILD_SECRET="+base.Secret,
		"HETSYNC_P2P_CHILD_PATH="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if _, err := cmd.StdinPipe(); err != nil { // the child blocks reading it until killed
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	r0 := <-res0
	if r0.err != nil {
		t.Fatalf("rank 0: %v (child: %s)", r0.err, stderr.String())
	}
	t.Cleanup(func() { r0.ep.Close() })
	if err := linkEveryPeer(context.Background(), r0.ep); err != nil {
		t.Fatalf("rank 0: %v (child: %s)", err, stderr.String())
	}
	return r0, cmd, out, stderr
}

func TestPeerKilledMidFrame(t *testing.T) {
	for _, tc := range []struct {
		path string
		want error
	}{{DataPathShm, shm.ErrPeerGone}, {DataPathTCP, io.ErrUnexpectedEOF}} {
		t.Run(tc.path, func(t *testing.T) {
			base := Config{Size: 2, Secret: "peer killed " + tc.path, DataPath: tc.path, Security: SecurityNone,
				JoinTimeout: 30 * time.Second, Logger: quiet}
			r0, cmd, out, stderr := startKilledChild(t, base, tc.path)
			if got := connPath(linksOf(r0.ep)[1]); got != tc.path {
				t.Fatalf("rank 0's connection to rank 1 is %s, want %s", got, tc.path)
			}
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := r0.ep.Recv(ctx, 1, partialHeader, make([]byte, 1<<20))
				errc <- err
			}()
			line := make([]byte, 6)
			if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
				t.Fatalf("child: %q, %v; stderr: %s", line, err, stderr.String())
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 || !errors.Is(err, tc.want) {
				t.Fatalf("Recv from a killed peer: %v; want a *PeerError of rank 0 naming rank 1 that wraps %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestMain runs rank 1 of TestPeerKilledMidFrame and of TestCMAPeerKilledMidTransfer, and the
// network-namespace ranks, when the test binary is started as their child.
func TestMain(m *testing.M) {
	if addr := os.Getenv("HETSYNC_P2P_CHILD"); addr != "" {
		os.Exit(killedChild(addr, os.Getenv("HETSYNC_P2P_CHILD_SECRET"), os.Getenv("HETSYNC_P2P_CHILD_PATH")))
	}
	if addr := os.Getenv(cmaChildEnv); addr != "" {
		os.Exit(cmaChild(addr, os.Getenv("HETSYNC_P2P_CHILD_SECRET")))
	}
	if args := os.Getenv(envNetnsRank); args != "" {
		os.Exit(netnsRank(args))
	}
	if args := os.Getenv(envLinkRank); args != "" {
		os.Exit(linkRank(args))
	}
	if os.Getenv(shmFullEnv) != "" {
		os.Exit(shmFullChild())
	}
	if addr := os.Getenv(frozenEnv); addr != "" {
		os.Exit(frozenChild(addr, os.Getenv("HETSYNC_P2P_CHILD_SECRET")))
	}
	if addr := os.Getenv(leaverEnv); addr != "" {
		os.Exit(leaver(addr, os.Getenv("HETSYNC_P2P_CHILD_SECRET")))
	}
	os.Exit(m.Run())
}

func killedChild(addr, secret, path string) int {
	ep, err := Join(context.Background(), Config{Rank: 1, Size: 2, Rendezvous: addr, Secret: secret,
		DataPath: path, Security: SecurityNone, JoinTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	if err := linkEveryPeer(context.Background(), ep); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	if err := writePartialFrame(ep, 0); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	fmt.Print("ready\n")
	io.Copy(io.Discard, os.Stdin) // until killed
	return 0
}

// TestShmRecvCancelMidMessage: a Recv cancelled while its message is half written returns at
// once (the endpoint interrupts the pipe's read with a deadline), and the whole message is
// delivered to the next Recv.
func TestShmRecvCancelMidMessage(t *testing.T) {
	base := Config{Size: 2, Secret: "shm cancel", DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	eps := startJob(t, base, nil)
	checkCancelMidMessage(t, eps, linksOf(eps[1])[0].(*shm.Pipe))
}

// checkCancelMidMessage writes, on w (rank 1's raw connection to rank 0), a frame header and
// the first 1000 bytes of a 4 MiB payload; rank 0's Recv of it is cancelled meanwhile, and
// once the rest arrives the next Recv must get the whole message intact.
func checkCancelMidMessage(t *testing.T, eps []transport.Endpoint, pipe io.Writer) {
	t.Helper()
	const n = 4 << 20 // more than a shared-memory ring or a data channel record
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var hdr [transport.FrameHeaderSize]byte
	f := transport.FrameHeader{Header: partialHeader, RawLen: n, WireLen: n}
	transport.MarshalFrameHeader(hdr[:], &f, crc32.MakeTable(crc32.Castagnoli))
	if _, err := pipe.Write(append(hdr[:], payload[:1000]...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := eps[0].Recv(ctx, 1, partialHeader, buf)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("cancelled Recv: %v; want context.Canceled naming rank 1", err)
	}
	if _, err := pipe.Write(payload[1000:]); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	clear(buf)
	if got, err := eps[0].Recv(ctx2, 1, partialHeader, buf); err != nil || got != n || !bytes.Equal(buf, payload) {
		t.Fatalf("Recv after the cancelled one: %d bytes, %v; want the whole %d-byte message intact", got, err, n)
	}
}

// TestShmHelloRefusals: a shared-memory hello is checked like any other before the listener
// touches a file, and one it cannot honour is refused with a reason: over a connection that is
// not a Unix socket, or naming a segment that does not exist or is not a segment name.
func TestShmHelloRefusals(t *testing.T) {
	logs, tag, token, acc := testAcceptor("shm hello")
	ul, err := listenUnix(filepath.Join(t.TempDir(), "l.sock"))
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	acc.serve(ul)
	acc.serve(tl)
	defer acc.stop(true)
	seg, err := shm.Create(shm.Options{RingSize: shm.MinRingSize})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	missing := "hetsync-shm-0123456789abcdef0123456789abcdef"
	cases := []struct {
		name, network, addr string
		hello               []byte
		want                byte
	}{
		{"bad token", "unix", ul.Addr().String(), encodeShmHello(tag, 0, 2, bytes.Repeat([]byte{8}, tokenLen), seg.Name()), helloBadToken},
		{"over tcp", "tcp", tl.Addr().String(), encodeShmHello(tag, 0, 2, token, seg.Name()), helloShmNotUnix},
		{"missing segment", "unix", ul.Addr().String(), encodeShmHello(tag, 0, 2, token, missing), helloShmFailed},
		{"not a segment name", "unix", ul.Addr().String(), encodeShmHello(tag, 0, 2, token, "../../etc/passwd"), helloShmFailed},
		{"good", "unix", ul.Addr().String(), encodeShmHello(tag, 1, 2, token, seg.Name()), helloOK},
	}
	for _, tc := range cases {
		c, err := net.Dial(tc.network, tc.addr)
		if err != nil {
			t.Fatalf("%s: dial: %v", tc.name, err)
		}
		defer c.Close()
		checkHelloReply(t, c, tc.name, tc.hello, tc.want)
		if tc.want != helloOK {
			if _, err := os.Stat(seg.Path()); err != nil {
				t.Errorf("%s: a refused hello touched the segment file: %v", tc.name, err)
			}
		}
	}
	// The good hello: the listener mapped the segment and removed its file.
	if _, err := os.Stat(seg.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("segment file still there after the listener mapped it: %v", err)
	}
	if !strings.Contains(logs.String(), "cannot share memory") {
		t.Errorf("the failed mapping is not logged:\n%s", logs.String())
	}
}

// checkHelloReply writes a data-path hello on c and checks the status byte of the listener's
// reply against want.
func checkHelloReply(t *testing.T, c net.Conn, name string, hello []byte, want byte) {
	t.Helper()
	if _, err := c.Write(hello); err != nil {
		t.Fatalf("%s: write: %v", name, err)
	}
	var r [replyLen]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		t.Fatalf("%s: reading the reply: %v", name, err)
	}
	if r[8] != want {
		t.Errorf("%s: status %q, want %q", name, helloStatusText(r[8]), helloStatusText(want))
	}
}
