package command

import (
	"strconv"
	"strings"
	"testing"
)

// TestBenchCompress runs bench --compress none, bf16 and int8 on the in-memory transport: each
// table checks its results (within the compression's bound) and shows the bytes each rank
// sent per call, half under bf16 and about a quarter under int8 of what none sends.
func TestBenchCompress(t *testing.T) {
	sent := map[string]float64{}
	for _, z := range []string{"none", "bf16", "int8"} {
		code, out, stderr := runCLI(t, "bench", "--transport", "mem", "--np", "4", "--collective", "ring",
			"-b", "64K", "-e", "64K", "-w", "1", "-n", "2", "--attribute", "0", "--format", "tsv", "--compress", z)
		if code != 0 {
			t.Fatalf("--compress %s: exit %d: %s", z, code, stderr)
		}
		var header, row []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.HasPrefix(line, "#bytes"):
				header = strings.Split(strings.TrimPrefix(line, "#"), "\t")
			case !strings.HasPrefix(line, "#") && header != nil && row == nil:
				row = strings.Split(line, "\t")
			}
		}
		if len(row) != len(header) || header[len(header)-1] != "sent_B" {
			t.Fatalf("--compress %s: no sent_B column in\n%s", z, out)
		}
		col := map[string]string{}
		for i, h := range header {
			col[h] = row[i]
		}
		if col["check"] != "OK" {
			t.Errorf("--compress %s: check %s", z, col["check"])
		}
		if sent[z], _ = strconv.ParseFloat(col["sent_B"], 64); sent[z] <= 0 {
			t.Errorf("--compress %s: sent_B %q", z, col["sent_B"])
		}
	}
	if want := float64(2 * 3 * (64 << 10) / 4); sent["none"] != want {
		t.Errorf("--compress none: %g bytes sent per rank, want %g (ring: 2(p-1)/p of the buffer)", sent["none"], want)
	}
	if sent["bf16"] != sent["none"]/2 {
		t.Errorf("--compress bf16: %g bytes sent per rank, want half of none's %g", sent["bf16"], sent["none"])
	}
	if q := sent["int8"] / sent["none"]; q < 0.25 || q > 0.27 {
		t.Errorf("--compress int8: %g bytes sent per rank, %.3f of none's", sent["int8"], q)
	}
	for _, tc := range []struct{ args, want string }{
		{"--compress int4", "--compress: compression \"int4\": unknown"},
		{"--compress int8 --codec fp16", "--compress int8 with --codec fp16"},
		{"--compress int8 --op allgather", "compresses allreduce only"},
		{"--compress int8 -o max", "not -o max"},
	} {
		code, _, stderr := runCLI(t, append([]string{"bench", "--transport", "mem", "--np", "2"}, strings.Fields(tc.args)...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench %s: exit %d, stderr %q; want an error containing %q", tc.args, code, stderr, tc.want)
		}
	}
}
