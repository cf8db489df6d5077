package exporter

import (
	"context"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hetsync/hetsync/metrics"
)

// scrape fetches url and parses the exposition, by family name.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the sample of family name with rank's label ("" for an unlabelled family).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name, rank string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no family %s", name)
	}
	for _, m := range f.Metric {
		got := ""
		for _, l := range m.Label {
			if l.GetName() == "rank" {
				got = l.GetValue()
			}
		}
		if got != rank {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("%s has no sample of rank %q", name, rank)
	return 0
}

// TestServeScrape observes rounds of 1 to 9 ranks and scrapes them over HTTP.
func TestServeScrape(t *testing.T) {
	for ranks := 1; ranks <= 9; ranks++ {
		t.Run(strconv.Itoa(ranks), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := New()
			addr, err := e.Serve(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			const rounds = 3
			for r := range ranks {
				for round := range rounds {
					e.Observe(&metrics.RoundRecord{Rank: r, Round: round, TimeS: float64(round+1) * 0.5, Samples: 64,
						ComputeS: 0.25 * float64(r+1), CommS: 0.125, WaitS: 0.0625, BytesSent: 1000, BytesRecv: 2000, Loss: 1 / float64(round+1)})
				}
			}
			e.ObserveEval(0.75, 0.5)
			fams := scrape(t, "http://"+addr.String()+"/metrics")
			for r := range ranks {
				l := strconv.Itoa(r)
				for _, c := range []struct {
					name string
					want float64
				}{
					{"hetsync_rounds_total", rounds}, {"hetsync_samples_total", 64 * rounds},
					{"hetsync_compute_seconds_total", 0.25 * float64(r+1) * rounds}, {"hetsync_comm_seconds_total", 0.125 * rounds},
					{"hetsync_wait_seconds_total", 0.0625 * rounds}, {"hetsync_bytes_sent_total", 1000 * rounds},
					{"hetsync_bytes_received_total", 2000 * rounds}, {"hetsync_round", rounds - 1},
					{"hetsync_samples_per_second", 128}, {"hetsync_train_loss", 1.0 / rounds},
				} {
					if got := value(t, fams, c.name, l); math.Abs(got-c.want) > 1e-9 {
						t.Errorf("%s{rank=%q} = %v, want %v", c.name, l, got, c.want)
					}
				}
			}
			if got := value(t, fams, "hetsync_test_accuracy", ""); got != 0.75 {
				t.Errorf("hetsync_test_accuracy = %v, want 0.75", got)
			}
			if n := len(fams["hetsync_rounds_total"].Metric); n != ranks {
				t.Errorf("%d ranks in hetsync_rounds_total, want %d", n, ranks)
			}
			// nothing of the client library's global registry (go_*, process_*) leaks in
			for name := range fams {
				if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
					t.Errorf("family %s is not the exporter's", name)
				}
			}
		})
	}
}

// TestServeStopsAndRefuses checks that the server ends with its context and that an address
// that cannot be had is an error naming the flag.
func TestServeStopsAndRefuses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := New().Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New().Serve(context.Background(), addr.String()); err == nil || !strings.Contains(err.Error(), "--metrics-addr "+addr.String()) {
		t.Errorf("a second server on %s: %v, want an error naming --metrics-addr", addr, err)
	}
	cancel()
	// Shutdown runs on its own goroutine: wait for it, boundedly, rather than for a clock
	for range 1000 {
		if _, err = http.Get("http://" + addr.String() + "/metrics"); err != nil {
			return
		}
		runtime.Gosched()
	}
	t.Errorf("the server still answers after its context ended")
}

func TestRankAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		rank int
		want string // "" wants an error
	}{
		{"127.0.0.1:9100", 0, "127.0.0.1:9100"},
		{"127.0.0.1:9100", 7, "127.0.0.1:9107"},
		{":9100", 3, ":9103"},
		{"[::1]:9100", 1, "[::1]:9101"},
		{"127.0.0.1:0", 5, "127.0.0.1:0"},
		{"127.0.0.1:65535", 1, ""},
		{"127.0.0.1", 0, ""},
		{"127.0.0.1:x", 0, ""},
		{"127.0.0.1:-1", 0, ""},
	} {
		got, err := RankAddr(tc.addr, tc.rank)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
				t.Errorf("RankAddr(%q, %d) = %q, %v; want an error naming --metrics-addr", tc.addr, tc.rank, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("RankAddr(%q, %d) = %q, %v; want %q", tc.addr, tc.rank, got, err, tc.want)
		}
	}
}

// TestBenchServeScrape observes the rows of bench tables (odd sizes, two collectives, checked
// and unchecked) and scrapes them: one sample per collective, operation and size, a wrong
// count only where a call was checked, and the number of sizes per table.
func TestBenchServeScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := NewBench()
	addr, err := b.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{0, 1, 7, 4093, 1 << 20}
	for i, size := range sizes {
		b.Observe(BenchRow{Collective: "ring", Op: "allreduce", Bytes: size, Seconds: float64(i+1) * 1e-5, AlgBW: 0.5, BusBW: 0.75, Wrong: int64(i), Checked: true})
		b.Observe(BenchRow{Collective: "butterfly", Op: "allreduce", Bytes: size, Seconds: 2e-5, AlgBW: 1, BusBW: 1.5})
	}
	fams := scrape(t, "http://"+addr.String()+"/metrics")
	sample := func(name, coll string, size int64) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if l["collective"] == coll && l["op"] == "allreduce" && l["bytes"] == strconv.FormatInt(size, 10) {
				if m.Counter != nil {
					return m.Counter.GetValue(), true
				}
				return m.Gauge.GetValue(), true
			}
		}
		return 0, false
	}
	for i, size := range sizes {
		for _, c := range []struct {
			name, coll string
			want       float64
			present    bool
		}{
			{"hetsync_bench_time_seconds", "ring", float64(i+1) * 1e-5, true},
			{"hetsync_bench_busbw_gigabytes_per_second", "ring", 0.75, true},
			{"hetsync_bench_algbw_gigabytes_per_second", "butterfly", 1, true},
			{"hetsync_bench_wrong_elements", "ring", float64(i), true},
			{"hetsync_bench_wrong_elements", "butterfly", 0, false},
		} {
			got, ok := sample(c.name, c.coll, size)
			if ok != c.present || math.Abs(got-c.want) > 1e-12 {
				t.Errorf("%s{collective=%s,bytes=%d} = %v (present %v), want %v (present %v)", c.name, c.coll, size, got, ok, c.want, c.present)
			}
		}
	}
	for _, m := range fams["hetsync_bench_sizes_total"].GetMetric() {
		if m.Counter.GetValue() != float64(len(sizes)) {
			t.Errorf("hetsync_bench_sizes_total %v = %v, want %d", m.Label, m.Counter.GetValue(), len(sizes))
		}
	}
	if n := len(fams["hetsync_bench_sizes_total"].GetMetric()); n != 2 {
		t.Errorf("%d tables counted, want 2", n)
	}
}
