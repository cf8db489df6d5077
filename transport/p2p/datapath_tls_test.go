package p2p

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport/shm"
)

// memberTLS is rank's TLS identity in the job of secret and size, checking peers against the
// keys of job `of` (size ranks too): an outsider is memberTLS(t, "other", of, …).
func memberTLS(t *testing.T, secret, of string, rank, size int) *rankTLS {
	t.Helper()
	sk, err := rankKey(secret, rank)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := jobIDs(of, size)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := newRankTLS(rank, sk, ids)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestTLSListenerRefusals drives rank 2 of 3's "tls" listener with members, outsiders and
// impostors: only another rank holding its own key and naming itself in the hello gets in;
// every refusal is logged with the dialing address, and the listener keeps serving.
func TestTLSListenerRefusals(t *testing.T) {
	const job = "tls members"
	logs, tag, token, acc := testAcceptor(job)
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	acc.serveTLS(l, memberTLS(t, job, job, 2, 3))
	defer acc.stop(true)
	addr := l.Addr().String()

	noCert := memberTLS(t, job, job, 0, 3).clientConfig(2)
	noCert.Certificates = nil
	cases := []struct {
		name   string
		client *tls.Config // nil: a plaintext connection
		hello  []byte
		want   byte // helloOK, or a refused status; 0xff: refused by the TLS handshake
	}{
		{"outsider", memberTLS(t, "outsider", job, 0, 3).clientConfig(2), encodeHello(tag, 0, 2, token), 0xff},
		{"wrong secret", memberTLS(t, job+" typo", job, 1, 3).clientConfig(2), encodeHello(tag, 1, 2, token), 0xff},
		{"no certificate", noCert, encodeHello(tag, 0, 2, token), 0xff},
		{"its own key", memberTLS(t, job, job, 2, 3).clientConfig(2), encodeHello(tag, 0, 2, token), 0xff},
		{"plaintext hello", nil, encodeHello(tag, 0, 2, token), 0xff},
		{"rank 1 claims rank 0", memberTLS(t, job, job, 1, 3).clientConfig(2), encodeHello(tag, 0, 2, token), helloWrongPeer},
		{"bad token", memberTLS(t, job, job, 0, 3).clientConfig(2), encodeHello(tag, 0, 2, bytes.Repeat([]byte{8}, tokenLen)), helloBadToken},
		{"good rank 0", memberTLS(t, job, job, 0, 3).clientConfig(2), encodeHello(tag, 0, 2, token), helloOK},
		{"good rank 1", memberTLS(t, job, job, 1, 3).clientConfig(2), encodeHello(tag, 1, 2, token), helloOK},
	}
	var keep []net.Conn
	defer func() {
		for _, c := range keep {
			c.Close()
		}
	}()
	for _, tc := range cases {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s: dial: %v", tc.name, err)
		}
		keep = append(keep, raw)
		_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
		c := raw
		if tc.client != nil {
			c = tls.Client(raw, tc.client)
		}
		if tc.want != 0xff {
			checkHelloReply(t, c, tc.name, tc.hello, tc.want)
		} else {
			// In TLS 1.3 the client finishes its half of the handshake before the listener
			// has judged its certificate, so the refusal may only show on the first read.
			_, _ = c.Write(tc.hello)
			var r [replyLen]byte
			if n, err := io.ReadFull(c, r[:]); err == nil {
				t.Errorf("%s: the listener answered a hello (status %q)", tc.name, helloStatusText(r[8]))
			} else if n > 0 {
				t.Errorf("%s: %d bytes of answer before the error %v", tc.name, n, err)
			}
		}
		if tc.want != helloOK {
			waitFor(t, func() bool { return strings.Contains(logs.String(), raw.LocalAddr().String()) },
				"%s: the refusal is not logged with the dialing address %s:\n%s", tc.name, raw.LocalAddr(), logs)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errors.Join(acc.await(ctx, 0), acc.await(ctx, 1)); err != nil {
		t.Fatalf("the acceptor did not collect ranks 0 and 1: %v", err)
	}
	for _, want := range []string{"no rank's of this job", "dialed itself", "libp2p peer identity does not match"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// waitFor polls cond for up to 10 s (the listener logs after it has closed the connection).
func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Errorf(format, args...)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTLSDialerRefusesImpostor: a listener at rank 1's address that cannot prove rank 1's key
// (an outsider, a rank with a wrong secret, or another rank of the job) gets no hello, and the
// dial fails naming both ranks and the reason.
func TestTLSDialerRefusesImpostor(t *testing.T) {
	const job = "tls dialer"
	cases := []struct {
		name     string
		listener *rankTLS
		want     string
	}{
		{"outsider", memberTLS(t, "outsider", job, 1, 2), "no rank's of this job"},
		{"wrong secret", memberTLS(t, job+" typo", job, 1, 2), "no rank's of this job"},
		{"another rank", memberTLS(t, job, job, 0, 2), "holds rank 0's key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs, tag, token, acc := testAcceptor(job)
			acc.rank = 1
			acc.conns = acc.conns[:1]
			l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			acc.serveTLS(l, tc.listener)
			defer acc.stop(true)
			d := &dialer{cfg: Config{Rank: 0, Size: 2, DataPath: DataPathTLS, Logger: quiet}, tag: tag, local: make([]locality, 2),
				tls:   memberTLS(t, job, job, 0, 2),
				peers: []peerInfo{{Rank: 0, Hostname: "a"}, {Rank: 1, Hostname: "b", TLS: l.Addr().String(), Token: token}}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := d.dial(ctx, 1)
			if err == nil {
				c.Close()
				t.Fatal("rank 0 connected to an impostor")
			}
			if !strings.HasPrefix(err.Error(), "rank 0: tls data connection to rank 1: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("dial: %v, want it to name ranks 0 and 1 and say %q", err, tc.want)
			}
			if strings.Contains(logs.String(), "refused a connection") {
				t.Errorf("the hello reached the impostor:\n%s", logs)
			}
		})
	}
}

// TestTLSAllReduce runs every allreduce algorithm over the "tls" path alone, and over "auto"
// with Security tls on two hosts, where auto must pick tls between hosts and shared memory
// within one.
func TestTLSAllReduce(t *testing.T) {
	cases := []struct {
		name     string
		size     int
		dataPath string
		perRank  func(r int, c *Config)
	}{
		{"tls/np3", 3, DataPathTLS, nil},
		{"auto/two-hosts/np4", 4, DataPathAuto, twoHosts},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := Config{Size: tc.size, Secret: "tls allreduce " + tc.name, DataPath: tc.dataPath,
				Security: SecurityTLS, JoinTimeout: 30 * time.Second, Logger: quiet}
			eps := startJob(t, base, tc.perRank)
			for r, ep := range eps {
				for peer, c := range linksOf(ep) {
					if peer == r {
						continue
					}
					var want any = &secureConn{}
					if tc.perRank != nil && r%2 == peer%2 {
						want = &shm.Pipe{}
					}
					if fmt.Sprintf("%T", c) != fmt.Sprintf("%T", want) {
						t.Errorf("rank %d to rank %d: a %T, want a %T", r, peer, c, want)
					}
				}
			}
			for r, ep := range eps {
				for peer, c := range linksOf(ep) {
					if sc, ok := c.(*secureConn); ok {
						if st := sc.c.ConnectionState(); st.Version != tls.VersionTLS13 {
							t.Errorf("rank %d to rank %d: TLS version %#x, want 1.3", r, peer, st.Version)
						}
					}
				}
			}
			checkAllReduce(t, eps)
		})
	}
}

// TestTLSRecvCancelMidMessage: a Recv cancelled while a message is half-arrived over the tls
// path interrupts the endpoint's read with a deadline; the data channel keeps its place, and
// the message arrives whole afterwards.
func TestTLSRecvCancelMidMessage(t *testing.T) {
	base := Config{Size: 2, Secret: "tls cancel", DataPath: DataPathTLS, Security: SecurityTLS,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	eps := startJob(t, base, nil)
	checkCancelMidMessage(t, eps, linksOf(eps[1])[0].(*secureConn))
}
