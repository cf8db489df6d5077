package netns

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/topology"
)

//go:embed topo.sh
var script []byte

// Topologies the script builds.
const (
	Uniform  = "uniform"  // every host on one switch, every access link at the same rate
	SlowHost = "slowhost" // the same, the last host's link Ratio times slower
	Racks    = "racks"    // hosts dealt in blocks to Racks racks, uplinks Ratio times slower
)

// Spec describes a network to build. Zero fields take the script's defaults (4 hosts, 200
// Mbit/s, ratio 10, 2 racks, a token bucket of 10 ms of traffic but at least 32 KiB, 20 ms of
// queue).
type Spec struct {
	Topology string
	Hosts    int
	RateMbit int // access link rate, Mbit/s
	Ratio    int // how many times slower the slow host's link or the uplinks are
	Racks    int // racks topology only
	// Unshaped leaves every link at veth speed, for tests that need hosts apart but no rate;
	// SetRate may still shape a link later.
	Unshaped bool
	// BurstBytes is every link's token bucket and Latency the longest a packet waits in its
	// queue (whole milliseconds), for a test that measures a link against other settings.
	BurstBytes int
	Latency    time.Duration
}

// check says what is wrong with spec, naming the field.
func (spec Spec) check() error {
	switch spec.Topology {
	case Uniform, SlowHost, Racks:
	default:
		return fmt.Errorf("unknown topology %q (%s, %s, %s)", spec.Topology, Uniform, SlowHost, Racks)
	}
	switch {
	case spec.Hosts < 0 || spec.RateMbit < 0 || spec.Ratio < 0 || spec.Racks < 0 || spec.BurstBytes < 0:
		return fmt.Errorf("spec %+v: a negative count", spec)
	case spec.Unshaped && (spec.RateMbit > 0 || spec.BurstBytes > 0 || spec.Latency > 0):
		return fmt.Errorf("spec %+v: Unshaped with a RateMbit, BurstBytes or Latency", spec)
	case spec.Latency < 0 || spec.Latency%time.Millisecond != 0:
		return fmt.Errorf("spec %+v: Latency %v is not a whole number of milliseconds", spec, spec.Latency)
	}
	return nil
}

// Host is one namespace of a network.
type Host struct {
	Namespace string
	Addr      string // IPv4 address on its eth0
	Rack      int
}

// Net is a built network; Down removes it.
type Net struct {
	Prefix string
	Spec   Spec
	Hosts  []Host
}

// Available says why networks cannot be built here (nil when they can): they need root and
// Debian's iproute2 (ip and tc).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	for _, cmd := range []string{"ip", "tc", "bash"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s is missing (Debian's iproute2 provides ip and tc)", cmd)
		}
	}
	return nil
}

// Up builds the network of spec under a fresh random prefix.
func Up(ctx context.Context, spec Spec) (*Net, error) {
	if err := Available(); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if err := spec.check(); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	n := &Net{Prefix: fmt.Sprintf("hsn%d%04d", os.Getpid()%1000, rand.IntN(10000)), Spec: spec}
	args := []string{"up", spec.Topology}
	if spec.Hosts > 0 {
		args = append(args, strconv.Itoa(spec.Hosts))
	}
	out, err := n.run(ctx, args...)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "host" {
			continue
		}
		rack, err := strconv.Atoi(f[3])
		if err != nil {
			_ = n.Down(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("netns: the script printed %q", sc.Text())
		}
		n.Hosts = append(n.Hosts, Host{Namespace: f[1], Addr: f[2], Rack: rack})
	}
	if len(n.Hosts) == 0 {
		_ = n.Down(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("netns: building %s printed no hosts:\n%s", spec.Topology, out)
	}
	return n, nil
}

// Down removes every namespace of the network.
func (n *Net) Down(ctx context.Context) error {
	_, err := n.run(ctx, "down")
	return err
}

// SetRate re-shapes one link, in both directions, while traffic may be running: host i's
// access link, or with uplink set rack i's uplink to the core.
func (n *Net) SetRate(ctx context.Context, i int, uplink bool, mbit int) error {
	link := strconv.Itoa(i)
	if uplink {
		link = "uplink" + link
	}
	_, err := n.run(ctx, "rate", link, strconv.Itoa(mbit))
	return err
}

// Stats is every shaped link's queue counters as tc prints them (sent, dropped,
// overlimits, backlog), for a test that failed to show what the links did.
func (n *Net) Stats(ctx context.Context) (string, error) {
	out, err := n.run(ctx, "stats")
	return string(out), err
}

// Links is the link matrix the network's shaping promises for ranks placed on hosts
// hostOf[0], hostOf[1], ... (one host index per rank): what a measurement of an idle network
// would find, for planning before one is made.
func (n *Net) Links(ctx context.Context, hostOf []int) (*topology.Matrix, error) {
	args := []string{"links"}
	for _, h := range hostOf {
		args = append(args, strconv.Itoa(h))
	}
	out, err := n.run(ctx, args...)
	if err != nil {
		return nil, err
	}
	m, err := topology.Unmarshal(out)
	if err != nil {
		return nil, fmt.Errorf("netns: links of %v: %w", hostOf, err)
	}
	return m, nil
}

// Command is name with args run inside host i's namespace.
func (n *Net) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Hosts[i].Namespace, name}, args...)...)
}

func (n *Net) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{"-s", "--"}, args...)...)
	cmd.Stdin = bytes.NewReader(script)
	cmd.Env = append(os.Environ(), "PREFIX="+n.Prefix)
	// Every setting is set, empty for the script's default, so that none comes from the
	// caller's environment.
	for k, v := range map[string]int{"RATE": n.Spec.RateMbit, "RATIO": n.Spec.Ratio, "RACKS": n.Spec.Racks,
		"BURST": n.Spec.BurstBytes, "LATENCY_MS": int(n.Spec.Latency / time.Millisecond)} {
		val := ""
		if v > 0 {
			val = strconv.Itoa(v)
		}
		cmd.Env = append(cmd.Env, k+"="+val)
	}
	cmd.Env = append(cmd.Env, "SUBNET=")
	if n.Spec.Unshaped {
		cmd.Env = append(cmd.Env, "RATE=0") // later entries win
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("netns: %s (prefix %s): %v: %s", strings.Join(args, " "), n.Prefix, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
