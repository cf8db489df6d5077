package p2p

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	tls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
)

// checkPortFree reports a TCP port already taken on ip as an error that says so, before
// libp2p is asked to listen there (its own error lists every address it tried).
func checkPortFree(ip net.IP, port int) error {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("port %d is already in use on this host (another job's rendezvous, or another program): give a free port, or no rendezvous address to get one", port)
	}
	if err != nil {
		return err
	}
	return l.Close()
}

// tcpMultiaddr turns ip:port into /ip4|ip6/IP/tcp/PORT.
func tcpMultiaddr(ip net.IP, port int) (ma.Multiaddr, error) {
	return manet.FromNetAddr(&net.TCPAddr{IP: ip, Port: port})
}

// newHost builds the libp2p host of one rank for a closed cluster: TCP only, listening on one
// address, TLS (or no security), yamux, no resource or connection limits, no relay, ping,
// metrics, DHT or mDNS, and a gater that admits only the job's members.
func newHost(sk crypto.PrivKey, listen ma.Multiaddr, security string, gater connmgr.ConnectionGater) (host.Host, error) {
	opts := []libp2p.Option{
		libp2p.Identity(sk),
		libp2p.ListenAddrs(listen),
		// Without reuseport a rendezvous port that is already taken is an error, not a
		// silently shared port.
		libp2p.Transport(tcp.NewTCPTransport, tcp.DisableReuseport()),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(&network.NullResourceManager{}),
		libp2p.ConnectionManager(&connmgr.NullConnMgr{}),
		libp2p.ConnectionGater(gater),
		libp2p.DisableRelay(),
		libp2p.Ping(false),
		libp2p.DisableMetrics(),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.UserAgent("hetsync"),
		// libp2p's dependency injection logs a failed start (a taken port) on its own before
		// returning the error; the error is reported once, with the rank, by the caller.
		libp2p.WithFxOption(fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger })),
	}
	switch security {
	case SecurityNone:
		opts = append(opts, libp2p.NoSecurity)
	default:
		opts = append(opts, libp2p.Security(tls.ID, tls.New))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the libp2p host on %s: %w", listen, err)
	}
	return h, nil
}
