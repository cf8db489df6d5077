package p2p

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// rankTLS is what a rank needs to speak the "tls" data path: its certificate, a self-signed
// X.509 certificate over its libp2p Ed25519 key, and every rank's public key, which is all a
// peer's certificate is checked against. No certificate authority, name or validity period
// enters the decision: a peer is who it claims to be when the TLS 1.3 handshake proves it holds
// the private key of that rank, and only the job secret yields those keys.
type rankTLS struct {
	rank int
	cert tls.Certificate
	keys []ed25519.PublicKey // index: rank
}

// newRankTLS builds rank's certificate from its key sk and collects the public keys of ids,
// the job's peer IDs (Ed25519 IDs embed their key).
func newRankTLS(rank int, sk crypto.PrivKey, ids []peer.ID) (*rankTLS, error) {
	raw, err := sk.Raw()
	if err != nil {
		return nil, fmt.Errorf("rank %d: reading the identity key: %w", rank, err)
	}
	if sk.Type() != crypto.Ed25519 || len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("rank %d: the identity key is a %v key of %d bytes, want Ed25519", rank, sk.Type(), len(raw))
	}
	priv := ed25519.PrivateKey(raw)
	keys := make([]ed25519.PublicKey, len(ids))
	for r, id := range ids {
		pk, err := id.ExtractPublicKey()
		if err != nil {
			return nil, fmt.Errorf("rank %d: the peer ID of rank %d carries no public key: %w", rank, r, err)
		}
		b, err := pk.Raw()
		if err != nil || pk.Type() != crypto.Ed25519 || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("rank %d: the peer ID of rank %d is not an Ed25519 key", rank, r)
		}
		keys[r] = ed25519.PublicKey(b)
	}
	// Validity and names are not checked by the peers (see verifyRank); they are filled in
	// only because X.509 requires them.
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(rank) + 1),
		Subject:      pkix.Name{CommonName: "hetsync rank " + strconv.Itoa(rank)},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, fmt.Errorf("rank %d: making the data-path certificate: %w", rank, err)
	}
	return &rankTLS{rank: rank, keys: keys, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}}, nil
}

// peerRank returns the rank whose key the certificate certifies, or an error that says what
// the certificate is instead.
func (t *rankTLS) peerRank(rawCerts [][]byte) (int, error) {
	if len(rawCerts) == 0 {
		return -1, errors.New("the peer sent no certificate")
	}
	c, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return -1, fmt.Errorf("the peer's certificate does not parse: %w", err)
	}
	return t.rankOfKey(c.PublicKey)
}

func (t *rankTLS) rankOfKey(key any) (int, error) {
	pk, ok := key.(ed25519.PublicKey)
	if !ok {
		return -1, fmt.Errorf("the peer's certificate holds a %T, not a rank's Ed25519 key", key)
	}
	for r, k := range t.keys {
		if k.Equal(pk) {
			return r, nil
		}
	}
	return -1, errors.New("the peer's key is no rank's of this job (another job, or a wrong HETSYNC_JOB_SECRET)")
}

// config is the TLS configuration of one side: TLS 1.3 only, this rank's certificate, the
// peer's certificate required and accepted by verify alone.
func (t *rankTLS) config(verify func(rank int) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		// The chain is not checked against authorities: the peer's key is, in
		// VerifyPeerCertificate, and the handshake's CertificateVerify proves the peer holds it.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			r, err := t.peerRank(rawCerts)
			if err != nil {
				return err
			}
			return verify(r)
		},
		// Bulk transfers on a closed cluster: full-size records from the first byte, and no
		// session resumption, whose tickets would only be kept and never used.
		DynamicRecordSizingDisabled: true,
		SessionTicketsDisabled:      true,
	}
}

// serverConfig accepts any other rank: the hello then has to name the same rank.
func (t *rankTLS) serverConfig() *tls.Config {
	return t.config(func(r int) error {
		if r == t.rank {
			return fmt.Errorf("rank %d dialed itself", r)
		}
		return nil
	})
}

// clientConfig accepts only rank `to`.
func (t *rankTLS) clientConfig(to int) *tls.Config {
	return t.config(func(r int) error {
		if r != to {
			return fmt.Errorf("the listener at rank %d's address holds rank %d's key", to, r)
		}
		return nil
	})
}

// tlsRank returns the rank whose certificate c's peer presented (its handshake is complete
// and verified, so there is one), or -1.
func (t *rankTLS) tlsRank(c *tls.Conn) int {
	st := c.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return -1
	}
	r, _ := t.rankOfKey(st.PeerCertificates[0].PublicKey)
	return r
}

// serveTLS accepts the "tls" data path on l: every connection is upgraded to TLS (the peer
// proving another rank's key) before its hello, which must then name that same rank.
func (a *acceptor) serveTLS(l net.Listener, t *rankTLS) {
	conf := t.serverConfig()
	a.serveWith(l, func(c net.Conn) {
		sc := newSecureConn(c, conf, false)
		if !a.track(sc) {
			c.Close()
			return
		}
		remote := c.RemoteAddr().String()
		go func() {
			_ = c.SetDeadline(time.Now().Add(helloTimeout))
			err := sc.handshake(context.Background())
			from := -1
			if err == nil {
				if from = t.tlsRank(sc.c); from < 0 {
					err = errors.New("no rank's certificate after the handshake")
				}
			}
			if err != nil {
				a.log.Warn("hetsync data path: refused a TLS connection", "rank", a.rank, "remote", remote, "err", err)
				sc.Close()
				a.untrack(sc)
				return
			}
			a.handshake(sc, remote, from)
		}()
	})
}

// dialTLS opens a direct TCP connection to rank them and secures it, expecting them's key.
func (d *dialer) dialTLS(ctx context.Context, them peerInfo) (dataConn, error) {
	if them.TLS == "" {
		return nil, errors.New("the peer has no TLS listener")
	}
	if d.tls == nil {
		return nil, errors.New("no TLS identity (internal error)")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", them.TLS)
	if err != nil {
		return nil, err
	}
	tuneConn(c)
	sc := newSecureConn(c, d.tls.clientConfig(them.Rank), true)
	if err := sc.handshake(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", them.TLS, err)
	}
	return sc, nil
}

// secureConn is a connection of the "tls" path: crypto/tls for the handshake and the hello,
// the data channel (see datachannel.go) for everything after. It is deliberately not a
// net.Conn, so that the framed endpoint hands each small frame (header and payload) to one
// Write, which becomes one record.
type secureConn struct {
	c        *tls.Conn
	raw      net.Conn
	isClient bool
	next     *dataChannel // keyed by handshake, in use from helloDone on
	ch       *dataChannel // nil during the hello
}

func newSecureConn(raw net.Conn, conf *tls.Config, isClient bool) *secureConn {
	hc := &handshakeConn{Conn: raw}
	s := &secureConn{raw: raw, isClient: isClient}
	if isClient {
		s.c = tls.Client(hc, conf)
	} else {
		s.c = tls.Server(hc, conf)
	}
	return s
}

// handshake runs the TLS handshake and derives the data channel's keys from it.
func (s *secureConn) handshake(ctx context.Context) error {
	if err := s.c.HandshakeContext(ctx); err != nil {
		return err
	}
	ch, err := newDataChannel(s.c, s.raw, s.isClient)
	if err != nil {
		return err
	}
	s.next = ch
	return nil
}

// helloDone switches to the data channel: the listener once it has sent its answer to the
// hello, the dialer once it has read it. Nothing else crosses the connection in between, so
// the two sides switch at the same byte.
func (s *secureConn) helloDone() { s.ch = s.next }

// helloSwitcher is a connection whose way of carrying data changes after the hello.
type helloSwitcher interface{ helloDone() }

func (s *secureConn) Read(p []byte) (int, error) {
	if s.ch != nil {
		return s.ch.Read(p)
	}
	return s.c.Read(p)
}

func (s *secureConn) Write(p []byte) (int, error) {
	if s.ch != nil {
		return s.ch.Write(p)
	}
	return s.c.Write(p)
}

func (s *secureConn) CloseWrite() error {
	if s.ch != nil {
		return s.ch.CloseWrite()
	}
	return s.c.CloseWrite()
}

func (s *secureConn) Close() error                       { return s.raw.Close() }
func (s *secureConn) SetDeadline(t time.Time) error      { return s.raw.SetDeadline(t) }
func (s *secureConn) SetReadDeadline(t time.Time) error  { return s.raw.SetReadDeadline(t) }
func (s *secureConn) SetWriteDeadline(t time.Time) error { return s.raw.SetWriteDeadline(t) }
