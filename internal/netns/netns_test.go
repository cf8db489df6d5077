package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the two ends of a throughput probe run inside namespaces.
const (
	envRole = "NETNS_TEST_ROLE" // "sink ADDR" or "source ADDR BYTES"
	port    = "5999"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := probe(strings.Fields(role)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe is one end: a sink accepts one connection and prints how many bytes it read in how
// many seconds; a source connects and writes its bytes.
func probe(f []string) error {
	switch {
	case len(f) == 2 && f[0] == "sink":
		l, err := net.Listen("tcp", net.JoinHostPort(f[1], port))
		if err != nil {
			return err
		}
		fmt.Println("listening")
		c, err := l.Accept()
		if err != nil {
			return err
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		fmt.Println(n, time.Since(start).Seconds())
		return err
	case len(f) == 3 && f[0] == "source":
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return err
		}
		var c net.Conn
		for try := 0; ; try++ { // the sink may not listen yet
			if c, err = net.Dial("tcp", net.JoinHostPort(f[1], port)); err == nil || try == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		if _, err := c.Write(make([]byte, n)); err != nil {
			return err
		}
		return c.Close()
	}
	return fmt.Errorf("%s %q: want sink ADDR or source ADDR BYTES", envRole, f)
}

// throughput sends bytes from host `from` to host `to` and returns the rate the sink saw, in
// Mbit/s.
func throughput(t *testing.T, n *Net, from, to, bytes int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sink := n.Command(ctx, to, os.Args[0], "-test.run=^$")
	sink.Env = append(os.Environ(), envRole+"=sink "+n.Hosts[to].Addr)
	out, err := sink.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sink.Stderr = os.Stderr
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	src := n.Command(ctx, from, os.Args[0], "-test.run=^$")
	src.Env = append(os.Environ(), fmt.Sprintf("%s=source %s %d", envRole, n.Hosts[to].Addr, bytes))
	if b, err := src.CombinedOutput(); err != nil {
		t.Fatalf("source on host %d: %v\n%s", from, err, b)
	}
	res, _ := io.ReadAll(out)
	if err := sink.Wait(); err != nil {
		t.Fatalf("sink on host %d: %v", to, err)
	}
	var got int
	var secs float64
	if _, err := fmt.Sscan(strings.TrimPrefix(string(res), "listening\n"), &got, &secs); err != nil || got != bytes {
		t.Fatalf("sink on host %d printed %q, want %d bytes", to, res, bytes)
	}
	return float64(bytes) * 8 / secs / 1e6
}

// TestTopologies builds each network and checks its shape and that its shaped links hold
// their rate: a token bucket never lets a transfer through faster than its rate (plus one
// bucket), so the upper bounds cannot fail on a slow machine; the transfers are sized to take
// about 0.3 s on the thin links.
func TestTopologies(t *testing.T) {
	tests := []struct {
		spec  Spec
		racks []int
		// thin is a pair of hosts whose path crosses a link of the slow rate.
		thin [2]int
	}{
		{Spec{Topology: Uniform, Hosts: 3, RateMbit: 40}, []int{0, 0, 0}, [2]int{0, 1}},
		{Spec{Topology: SlowHost, Hosts: 3, RateMbit: 200, Ratio: 5}, []int{0, 0, 0}, [2]int{0, 2}},
		{Spec{Topology: Racks, Hosts: 5, RateMbit: 200, Ratio: 5}, []int{0, 0, 0, 1, 1}, [2]int{1, 4}},
		{Spec{Topology: Racks, Hosts: 3, RateMbit: 200, Ratio: 5, Racks: 3}, []int{0, 1, 2}, [2]int{2, 0}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s-%d", tc.spec.Topology, tc.spec.Hosts), func(t *testing.T) {
			n := ForTest(t, tc.spec)
			if len(n.Hosts) != len(tc.racks) {
				t.Fatalf("%d hosts, want %d", len(n.Hosts), len(tc.racks))
			}
			for i, h := range n.Hosts {
				if h.Rack != tc.racks[i] || h.Addr == "" || !strings.HasPrefix(h.Namespace, n.Prefix) {
					t.Errorf("host %d = %+v, want rack %d under prefix %s", i, h, tc.racks[i], n.Prefix)
				}
			}
			slow := float64(tc.spec.RateMbit) / float64(max(tc.spec.Ratio, 1))
			if tc.spec.Topology == Uniform {
				slow = float64(tc.spec.RateMbit)
			}
			bytes := int(slow * 1e6 / 8) // a second's worth: the bucket's burst adds little
			got := throughput(t, n, tc.thin[0], tc.thin[1], bytes)
			t.Logf("host %d -> %d: %.1f Mbit/s through a %.0f Mbit/s link", tc.thin[0], tc.thin[1], got, slow)
			if got > slow*1.25 {
				t.Errorf("host %d -> %d moved %.1f Mbit/s through a link shaped to %.0f", tc.thin[0], tc.thin[1], got, slow)
			}
		})
	}
}

// TestSetRate throttles a rack's uplink while the network is up.
func TestSetRate(t *testing.T) {
	n := ForTest(t, Spec{Topology: Racks, Hosts: 2, RateMbit: 100})
	if err := n.SetRate(context.Background(), 1, true, 4); err != nil {
		t.Fatal(err)
	}
	// A second's worth of bytes, so that the bucket's burst (32 KiB at least) adds little.
	got := throughput(t, n, 0, 1, 4e6/8)
	if got > 4*1.25 {
		t.Errorf("%.1f Mbit/s through an uplink throttled to 4", got)
	}
	for _, bad := range []struct {
		i      int
		uplink bool
		mbit   int
	}{{7, false, 10}, {5, true, 10}, {0, false, 0}} {
		if err := n.SetRate(context.Background(), bad.i, bad.uplink, bad.mbit); err == nil {
			t.Errorf("SetRate(%d, %v, %d) accepted", bad.i, bad.uplink, bad.mbit)
		}
	}
}

func TestUpRejects(t *testing.T) {
	RequireAvailable(t)
	for _, spec := range []Spec{{Topology: "mesh"}, {Topology: Racks, Hosts: 2, Racks: 3}} {
		if n, err := Up(context.Background(), spec); err == nil {
			_ = n.Down(context.Background())
			t.Errorf("Up(%+v) accepted", spec)
		}
	}
}

func TestLinks(t *testing.T) {
	n := ForTest(t, Spec{Topology: Racks, Hosts: 4, RateMbit: 100, Ratio: 4})
	m, err := n.Links(context.Background(), []int{3, 0, 3, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Host) != "[0 1 0 2 3]" {
		t.Errorf("hosts %v, want ranks 0 and 2 on one host, indices in order of first use", m.Host)
	}
	inRack, across := m.Links[1][3].Beta, m.Links[0][1].Beta // hosts 0-1 share rack 0; host 3 is in rack 1
	if want := 8 / 100e6; inRack != want {
		t.Errorf("beta inside a rack %g, want %g", inRack, want)
	}
	if want := 8 / 25e6; across != want {
		t.Errorf("beta across racks %g, want %g", across, want)
	}
	if m.Links[0][2].Beta >= inRack {
		t.Errorf("beta on one host %g is not below the network's", m.Links[0][2].Beta)
	}
	if _, err := n.Links(context.Background(), []int{0, 4}); err == nil {
		t.Error("a rank on host 4 of 4 accepted")
	}
}

func TestSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		ok   bool
	}{
		{Spec{Topology: Uniform}, true},
		{Spec{Topology: Racks, Hosts: 5, Racks: 3, RateMbit: 10, Ratio: 3}, true},
		{Spec{Topology: SlowHost, Hosts: 1, Unshaped: true}, true},
		{Spec{Topology: Uniform, Hosts: 7, RateMbit: 100, BurstBytes: 32 << 10, Latency: 50 * time.Millisecond}, true},
		{Spec{Topology: "mesh"}, false},
		{Spec{}, false},
		{Spec{Topology: Uniform, Hosts: -1}, false},
		{Spec{Topology: Uniform, BurstBytes: -3}, false},
		{Spec{Topology: Uniform, Unshaped: true, RateMbit: 100}, false},
		{Spec{Topology: Uniform, Unshaped: true, Latency: time.Millisecond}, false},
		{Spec{Topology: Uniform, Latency: 1500 * time.Microsecond}, false},
		{Spec{Topology: Uniform, Latency: -time.Millisecond}, false},
	} {
		if err := tc.spec.check(); (err == nil) != tc.ok {
			t.Errorf("check(%+v) = %v, want ok %v", tc.spec, err, tc.ok)
		}
	}
}

// TestShaping checks the token bucket a Spec asks for is the one on the links, and that an
// unshaped network has none and promises no link matrix.
func TestShaping(t *testing.T) {
	qdisc := func(n *Net, i int) string {
		out, err := n.Command(context.Background(), i, "tc", "qdisc", "show", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("tc on host %d: %v\n%s", i, err, out)
		}
		return string(out)
	}
	shaped := ForTest(t, Spec{Topology: Uniform, Hosts: 2, RateMbit: 100, BurstBytes: 32 << 10, Latency: 50 * time.Millisecond})
	for i := range 2 {
		if q := qdisc(shaped, i); !strings.Contains(q, "tbf") || !strings.Contains(q, "rate 100Mbit burst 32Kb lat 50ms") {
			t.Errorf("host %d's link: %q, want tbf rate 100Mbit burst 32Kb lat 50ms", i, q)
		}
	}
	unshaped := ForTest(t, Spec{Topology: Racks, Hosts: 3, Unshaped: true})
	for i := range 3 {
		if q := qdisc(unshaped, i); strings.Contains(q, "tbf") {
			t.Errorf("host %d of an unshaped network: %q", i, q)
		}
	}
	if _, err := unshaped.Links(context.Background(), []int{0, 1}); err == nil {
		t.Error("an unshaped network promised a link matrix")
	}
}
