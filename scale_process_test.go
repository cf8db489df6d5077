package hetsync_test

import (
	"strconv"
	"strings"
	"testing"
)

// processScaleRanks is the process job the scale test forms: one OS process a rank, all on
// this host, far more ranks than it has cores, as a job of 16 hosts × 8 GPUs has ranks.
const processScaleRanks = 128

// A job of 128 rank processes over loopback TCP forms and runs ring allreduces of 4 KiB and
// 1 MiB, every rank's result checked by the bench (its #wrong column, and its exit status,
// which is rank 0's error when any element was wrong).
//
// The ranks beat heartbeats as every job does (the default peer timeout): along their links
// and a fixed O(log p) set, not every pair (transport/p2p; a full mesh of 8,128 heartbeat
// connections took such a job from about 40 s to over 10 minutes on a 2-core host,
// docs/results/scale.md). The ranks take bench's defaults for an oversubscribed host
// otherwise (no polling).
func TestProcessJobOf128Ranks(t *testing.T) {
	hetsyncBin, _ := binaries(t)
	np := strconv.Itoa(processScaleRanks)
	out := run(t, nil, hetsyncBin, "bench", "-np", np, "--security", "none", "--data-path", "tcp",
		"--join-timeout", "2m", "--collective", "ring", "--op", "allreduce",
		"-b", "4K", "-e", "1M", "-f", "256", "-w", "1", "-n", "2", "-c", "1", "--settle", "0")
	if !strings.Contains(out, "P="+np+" collective=ring op=allreduce transport=p2p data-path=tcp security=none") {
		t.Fatalf("no table of a %s-rank ring allreduce over tcp:\n%s", np, out)
	}
	rows := map[string]string{} // size in bytes -> #wrong
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 8 && f[4] == "ring" && f[3] == "sum" {
			rows[f[0]] = f[8]
		}
	}
	for _, size := range []string{"4096", "1048576"} {
		if wrong, ok := rows[size]; !ok || wrong != "0" {
			t.Errorf("allreduce of %s bytes: #wrong %q (present %v), want 0\n%s", size, wrong, ok, out)
		}
	}
	if !strings.Contains(out, "Out of bounds values : 0 OK") {
		t.Errorf("the bench does not report every checked element right:\n%s", out)
	}
}
