package main

import (
	"bufio"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
