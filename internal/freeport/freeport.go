// Package freeport finds a TCP port for a job's rendezvous that stays free until rank 0 binds
// it. A port the kernel hands out for ":0" comes from its ephemeral range, from which it also
// draws every other listener and outgoing connection: between the moment a launcher picks such
// a port and the moment rank 0 binds it, another rank's data listener can take it, as it
// does when several ranks start at once. A port below the ephemeral range is never handed
// out that way. The package must never hold a port: it only picks one.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const (
	// low is the lowest port tried: above the well-known and most registered service ports.
	low   = 20000
	tries = 64
	// rangeFile holds the kernel's ephemeral range, "LOW\tHIGH".
	rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
)

// Addr returns host:PORT with a port that was free on host a moment ago, below the kernel's
// ephemeral range when it leaves room there, else one the kernel picks.
func Addr(host string) (string, error) {
	if hi := ephemeralLow(); hi > low {
		for range tries {
			p := low + rand.IntN(hi-low)
			addr := net.JoinHostPort(host, strconv.Itoa(p))
			if l, err := net.Listen("tcp", addr); err == nil {
				if err := l.Close(); err != nil {
					return "", err
				}
				return addr, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", err
	}
	return addr, nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range, 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
