package command

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestTrainServesLiveMetrics starts `hetsync train --metrics-addr` as a subprocess, launched
// (a server per rank) and in one process (one server for every rank), and scrapes each
// server while the job runs until every rank's rounds are counted.
func TestTrainServesLiveMetrics(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 600, 100)
	announce := regexp.MustCompile(`(rank \d+|ranks 0-\d+): live metrics at http://(\S+)/metrics`)
	for _, tc := range []struct {
		name    string
		args    []string
		servers int
		ranks   int
	}{
		{"launched", []string{"-np", "2", "--security", "none", "--data-path", "tcp"}, 2, 2},
		{"mem", []string{"-np", "3", "--transport", "mem"}, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append([]string{"train", "--data", data, "--out", filepath.Join(dir, tc.name), "--max-rounds", "100000",
				"--batch", "8", "--threads", "1", "--eval-every", "5", "--metrics-addr", "127.0.0.1:0"}, tc.args...)
			cmd := exec.CommandContext(ctx, hetsyncBinary(t), args...)
			cmd.Dir = dir
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
			var (
				mu    sync.Mutex
				lines []string
				addrs = map[string]string{}
				found = make(chan struct{})
			)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					mu.Lock()
					lines = append(lines, sc.Text())
					if m := announce.FindStringSubmatch(sc.Text()); m != nil {
						addrs[m[1]] = m[2]
						if len(addrs) == tc.servers {
							close(found)
						}
					}
					mu.Unlock()
				}
			}()
			select {
			case <-found:
			case <-ctx.Done():
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the ranks did not announce %d metrics servers:\n%s", tc.servers, strings.Join(lines, "\n"))
			}
			mu.Lock()
			urls := make([]string, 0, len(addrs))
			for _, a := range addrs {
				urls = append(urls, "http://"+a+"/metrics")
			}
			mu.Unlock()
			// scrape until every rank has counted 5 rounds, on whichever server serves it
			seen := map[string]float64{}
			for len(seen) < tc.ranks || minValue(seen) < 5 {
				if ctx.Err() != nil {
					t.Fatalf("rounds scraped %v, want %d ranks with 5 rounds each", seen, tc.ranks)
				}
				for _, u := range urls {
					resp, err := http.Get(u)
					if err != nil {
						t.Fatalf("scraping %s while the job runs: %v", u, err)
					}
					p := expfmt.NewTextParser(model.UTF8Validation)
					fams, err := p.TextToMetricFamilies(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatalf("%s: %v", u, err)
					}
					for _, name := range []string{"hetsync_samples_total", "hetsync_compute_seconds_total", "hetsync_comm_seconds_total",
						"hetsync_wait_seconds_total", "hetsync_bytes_sent_total", "hetsync_train_loss", "hetsync_samples_per_second"} {
						if fams["hetsync_rounds_total"] != nil && fams[name] == nil {
							t.Fatalf("%s has rounds but no %s", u, name)
						}
					}
					if f := fams["hetsync_rounds_total"]; f != nil {
						for _, m := range f.Metric {
							for _, l := range m.Label {
								if l.GetName() == "rank" {
									seen[l.GetValue()] = m.Counter.GetValue()
								}
							}
						}
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func minValue(m map[string]float64) float64 {
	lo := -1.0
	for _, v := range m {
		if lo < 0 || v < lo {
			lo = v
		}
	}
	return lo
}

// TestBenchServesLiveResults starts `hetsync bench --metrics-addr`, launched and in one
// process, scrapes rank 0's server while the sweep runs until three sizes are there, and
// checks each scraped size against the row the table printed for it.
func TestBenchServesLiveResults(t *testing.T) {
	announce := regexp.MustCompile(`rank 0: live bench results at http://(\S+)/metrics`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"launched", []string{"-np", "2", "--security", "none", "--data-path", "tcp"}},
		{"mem", []string{"-np", "3", "--transport", "mem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// a sweep far longer than the test waits for: it is stopped once scraped
			args := append([]string{"bench", "-b", "4K", "-e", "16M", "-f", "2", "--target-sec", "1", "--collective", "ring",
				"--metrics-addr", "127.0.0.1:0"}, tc.args...)
			cmd := exec.CommandContext(ctx, hetsyncBinary(t), args...)
			cmd.Dir = t.TempDir()
			var stdout bytes.Buffer // read once the process has exited
			cmd.Stdout = &stdout
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			stopped := false
			defer func() {
				if !stopped {
					cmd.Process.Signal(syscall.SIGINT)
					cmd.Wait()
				}
			}()
			addr := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					if m := announce.FindStringSubmatch(sc.Text()); m != nil {
						addr <- m[1]
					}
				}
			}()
			var url string
			select {
			case a := <-addr:
				url = "http://" + a + "/metrics"
			case <-ctx.Done():
				t.Fatal("rank 0 did not announce its results server")
			}
			var fams map[string]*dto.MetricFamily
			for {
				if ctx.Err() != nil {
					t.Fatalf("fewer than 3 sizes served by the end: %v", fams)
				}
				resp, err := http.Get(url)
				if err != nil {
					t.Fatalf("scraping %s while the bench runs: %v", url, err)
				}
				p := expfmt.NewTextParser(model.UTF8Validation)
				fams, err = p.TextToMetricFamilies(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("%s: %v", url, err)
				}
				if f := fams["hetsync_bench_sizes_total"]; f != nil && f.Metric[0].Counter.GetValue() >= 3 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
			stopped = true
			printed := map[string][]string{} // size → the table's row
			for line := range strings.SplitSeq(stdout.String(), "\n") {
				if f := strings.Fields(line); len(f) > 8 && !strings.HasPrefix(line, "#") {
					printed[f[0]] = f
				}
			}
			times := fams["hetsync_bench_time_seconds"]
			if times == nil || len(times.Metric) < 3 {
				t.Fatalf("hetsync_bench_time_seconds: %v, want 3 sizes or more", times)
			}
			for _, m := range times.Metric {
				labels := map[string]string{}
				for _, l := range m.Label {
					labels[l.GetName()] = l.GetValue()
				}
				row := printed[labels["bytes"]]
				if labels["collective"] != "ring" || labels["op"] != "allreduce" || row == nil {
					t.Errorf("a sample %v that the table (%d rows) does not have", labels, len(printed))
					continue
				}
				// the table's time column is µs with two decimals; #wrong is its 9th column
				if us := m.Gauge.GetValue() * 1e6; strings.TrimSpace(fmt.Sprintf("%10.2f", us)) != row[5] {
					t.Errorf("size %s: served %.3f µs, the table printed %s", labels["bytes"], us, row[5])
				}
				if got := sampleOf(fams["hetsync_bench_wrong_elements"], labels["bytes"]); got == nil || *got != 0 || row[8] != "0" {
					t.Errorf("size %s: wrong elements served %v, printed %s; want 0 checked", labels["bytes"], got, row[8])
				}
				if got := sampleOf(fams["hetsync_bench_busbw_gigabytes_per_second"], labels["bytes"]); got == nil || *got <= 0 {
					t.Errorf("size %s: bus bandwidth served %v, want > 0", labels["bytes"], got)
				}
			}
		})
	}
}

// sampleOf is the gauge of f labelled bytes=size, nil when there is none.
func sampleOf(f *dto.MetricFamily, size string) *float64 {
	if f == nil {
		return nil
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "bytes" && l.GetValue() == size {
				v := m.Gauge.GetValue()
				return &v
			}
		}
	}
	return nil
}
