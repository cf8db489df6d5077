package p2p

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// BenchmarkFormation forms a job of 64 ranks in this process (8 hosts of 8 ranks as the host
// names tell, plain TCP, no TLS), runs its first ring allreduce of 1024 floats, and closes it:
// what a job pays before its first step. It reports the time to form (join-ms), to finish
// the first allreduce after that (first-ms), and the sockets the process holds open per rank
// once that allreduce is done (sockets/rank: listeners, data and libp2p connections).
func BenchmarkFormation(b *testing.B) {
	const size, perHost = 64, 8
	var joinT, firstT time.Duration
	sockets := 0
	for i := range b.N {
		base := Config{Size: size, Secret: fmt.Sprintf("formation %d", i), DataPath: DataPathTCP,
			Security: SecurityNone, JoinTimeout: 2 * time.Minute, Logger: quiet}
		start := time.Now()
		eps := formJobWith(b, base, func(r int, c *Config) { c.Hostname = fmt.Sprintf("host-%d", r/perHost) }, hooks{})
		joined := time.Now()
		if err := ringOnce(eps); err != nil {
			closeAll(eps)
			b.Fatal(err)
		}
		joinT += joined.Sub(start)
		firstT += time.Since(joined)
		sockets = openSockets()
		closeAll(eps)
	}
	b.ReportMetric(float64(joinT.Milliseconds())/float64(b.N), "join-ms")
	b.ReportMetric(float64(firstT.Milliseconds())/float64(b.N), "first-ms")
	b.ReportMetric(float64(sockets)/size, "sockets/rank")
}

// ringOnce runs one ring allreduce of 1024 floats on every rank of eps.
func ringOnce(eps []transport.Endpoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return eachRank(eps, func(ep transport.Endpoint) error {
		c, err := collective.New(ep, collective.Options{Algorithm: "ring"})
		if err != nil {
			return err
		}
		return c.AllReduce(ctx, collective.F32(make([]float32, 1024)), collective.Sum)
	})
}

// openSockets counts the sockets this process holds open.
func openSockets() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
