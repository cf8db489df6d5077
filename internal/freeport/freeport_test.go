package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrIsFreeAndOutsideTheEphemeralRange binds every address Addr returns, and checks that
// it lies below the kernel's ephemeral range where the kernel leaves room there.
func TestAddrIsFreeAndOutsideTheEphemeralRange(t *testing.T) {
	eph := ephemeralLow()
	for range 20 {
		addr, err := Addr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		_, ps, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(ps)
		if eph > low && (p < low || p >= eph) {
			t.Errorf("port %d outside [%d, %d)", p, low, eph)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s was not free: %v", addr, err)
		}
		l.Close()
	}
}
