package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"8", 8, false}, {"4K", 4096, false}, {"4k", 4096, false}, {"256M", 256 << 20, false},
		{"1G", 1 << 30, false}, {"2KiB", 2048, false}, {"64MB", 64 << 20, false}, {"1T", 1 << 40, false},
		{" 16 ", 16, false}, {"0", 0, false},
		{"", 0, true}, {"K", 0, true}, {"-4K", 0, true}, {"4X", 0, true}, {"1.5M", 0, true},
		{"99999999999G", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error=%v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			back, err := ParseSize(FormatSize(got))
			if err != nil || back != got {
				t.Errorf("FormatSize(%d) = %q does not parse back", got, FormatSize(got))
			}
		}
	}
	for n, want := range map[int64]string{4096: "4K", 256 << 20: "256M", 1000: "1000", 1 << 30: "1G", 3 << 10: "3K"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSweep(t *testing.T) {
	tests := []struct {
		min, max int64
		f        int
		want     []int64
		err      string
	}{
		{4096, 65536, 4, []int64{4096, 16384, 65536}, ""},
		{4096, 100000, 4, []int64{4096, 16384, 65536}, ""},
		{8, 8, 0, []int64{8}, ""},
		{1, 8, 2, []int64{1, 2, 4, 8}, ""},
		{1 << 62, 1<<63 - 1, 4, []int64{1 << 62}, ""},
		{0, 8, 2, nil, "-b 0"},
		{16, 8, 2, nil, "-e 8 is smaller than -b 16"},
		{8, 16, 1, nil, "-f 1"},
	}
	for _, tc := range tests {
		got, err := Sweep(tc.min, tc.max, tc.f)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Sweep(%d,%d,%d) error = %v, want %q", tc.min, tc.max, tc.f, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Sweep(%d,%d,%d) = %v, %v; want %v", tc.min, tc.max, tc.f, got, err, tc.want)
		}
	}
}

func TestBusFactor(t *testing.T) {
	tests := []struct {
		op   Op
		p    int
		want float64
	}{
		{AllReduce, 1, 0}, {AllReduce, 2, 1}, {AllReduce, 4, 1.5}, {AllReduce, 8, 1.75},
		{ReduceScatter, 4, 0.75}, {AllGather, 4, 0.75}, {AllToAll, 2, 0.5}, {AllGather, 1, 0},
		{Broadcast, 4, 1}, {Broadcast, 1, 1},
	}
	for _, tc := range tests {
		if got := BusFactor(tc.op, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("BusFactor(%v, %d) = %v, want %v", tc.op, tc.p, got, tc.want)
		}
	}
}

func TestParseOp(t *testing.T) {
	for in, want := range map[string]Op{"allreduce": AllReduce, "all_reduce": AllReduce, "ReduceScatter": ReduceScatter,
		"reduce-scatter": ReduceScatter, "allgather": AllGather, "broadcast": Broadcast, "alltoall": AllToAll} {
		if got, err := ParseOp(in); err != nil || got != want {
			t.Errorf("ParseOp(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseOp("gather"); err == nil || !strings.Contains(err.Error(), "allreduce, reducescatter, allgather, broadcast, alltoall") {
		t.Errorf("ParseOp(gather) error = %v, want the list of known ops", err)
	}
	if _, err := ParseRedOp("mean"); err == nil {
		t.Error("ParseRedOp(mean) succeeded")
	}
	if o, err := ParseRedOp("MAX"); err != nil || o != collective.Max {
		t.Errorf("ParseRedOp(MAX) = %v, %v", o, err)
	}
}

func TestElements(t *testing.T) {
	tests := []struct {
		op    Op
		bytes int64
		p     int
		want  int
	}{
		{AllReduce, 4096, 3, 1024}, {AllReduce, 6, 3, 1}, {AllReduce, 1, 3, 1},
		{ReduceScatter, 4096, 3, 1023}, {AllGather, 4, 3, 3}, {AllToAll, 4096, 4, 1024}, {Broadcast, 10, 4, 2},
	}
	for _, tc := range tests {
		if got := elements(tc.op, tc.bytes, tc.p); got != tc.want {
			t.Errorf("elements(%v, %d, %d) = %d, want %d", tc.op, tc.bytes, tc.p, got, tc.want)
		}
	}
}

// runJob runs Run on every rank of an in-process job with refComm and returns rank 0's rows
// after checking that every rank got the same ones.
func runJob(t *testing.T, p int, cfg Config, corruptRank int) []Row {
	t.Helper()
	eps := transport.NewMemJob(p)
	rows := make([][]Row, p)
	errs := make([]error, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for r := range eps {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rows[r], errs[r] = Run(ctx, &refComm{ep: eps[r], corruptRank: corruptRank}, cfg, nil)
			if errs[r] != nil {
				cancel()
			}
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 1; r < p; r++ {
		if fmt.Sprint(rows[r]) != fmt.Sprint(rows[0]) {
			t.Fatalf("rank %d got different rows from rank 0:\n%v\n%v", r, rows[r], rows[0])
		}
	}
	return rows[0]
}

func TestRunChecksEveryOp(t *testing.T) {
	for _, op := range []Op{AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll} {
		for _, red := range []collective.ReduceOp{collective.Sum, collective.Avg, collective.Min, collective.Max, collective.Prod} {
			if !op.reduces() && red != collective.Sum {
				continue
			}
			for _, p := range []int{1, 2, 3, 4, 5, 7} {
				t.Run(fmt.Sprintf("%v/%v/p=%d", op, red, p), func(t *testing.T) {
					cfg := Config{Op: op, RedOp: red, MinBytes: 4, MaxBytes: 4 << 10, Factor: 4, Warmup: 1, Iters: 2, Check: 2, Root: p - 1}
					rows := runJob(t, p, cfg, -1)
					if len(rows) == 0 {
						t.Fatal("no rows")
					}
					for _, r := range rows {
						if r.Wrong != 0 || r.CheckString() != "OK" || r.Checks != 2 {
							t.Errorf("size %d: %d wrong elements (check %q)", r.Bytes, r.Wrong, r.CheckString())
						}
						if r.Count*4 != int(r.Bytes) || (op.blocked() && r.Count%p != 0) {
							t.Errorf("size %d count %d is not a valid %v count for p=%d", r.Bytes, r.Count, op, p)
						}
						if r.MinUs > r.AvgUs || r.AvgUs > r.MaxUs || r.MinUs < 0 {
							t.Errorf("size %d: min/avg/max %v/%v/%v out of order", r.Bytes, r.MinUs, r.AvgUs, r.MaxUs)
						}
						if r.Algo != "reference" || r.Iters != 2 {
							t.Errorf("row %+v: wrong algo or iters", r)
						}
					}
					if rows[len(rows)-1].Bytes > 4<<10 {
						t.Errorf("last size %d exceeds -e", rows[len(rows)-1].Bytes)
					}
				})
			}
		}
	}
}

func TestRunCountsWrongElements(t *testing.T) {
	const p, checks = 3, 2
	for _, op := range []Op{AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll} {
		t.Run(op.String(), func(t *testing.T) {
			cfg := Config{Op: op, MinBytes: 1 << 10, MaxBytes: 4 << 10, Factor: 2, Iters: 1, Check: checks}
			rows := runJob(t, p, cfg, 1)
			for _, r := range rows {
				// rank 1 corrupts one element of its result per call.
				if r.Wrong != checks {
					t.Errorf("size %d: counted %d wrong elements, want %d", r.Bytes, r.Wrong, checks)
				}
				if r.CheckString() != fmt.Sprintf("wrong=%d", checks) {
					t.Errorf("check column %q", r.CheckString())
				}
			}
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	eps := transport.NewMemJob(2)
	base := Config{Op: AllReduce, MinBytes: 8, MaxBytes: 8, Factor: 2, Iters: 1}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no op", func(c *Config) { c.Op = 0 }, "unknown op"},
		{"no iters", func(c *Config) { c.Iters = 0 }, "-n 0"},
		{"negative warmup", func(c *Config) { c.Warmup = -1 }, "-w -1"},
		{"negative check", func(c *Config) { c.Check = -1 }, "-c -1"},
		{"negative target", func(c *Config) { c.TargetSeconds = -1 }, "--target-sec -1"},
		{"root out of range", func(c *Config) { c.Root = 2 }, "-r 2"},
		{"sizes", func(c *Config) { c.MinBytes = 16 }, "-e 8 is smaller than -b 16"},
		{"reduction", func(c *Config) { c.RedOp = 99 }, "-o"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			_, err := Run(context.Background(), &refComm{ep: eps[0], corruptRank: -1}, cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rank 0") {
				t.Errorf("Run error = %v, want one naming rank 0 and containing %q", err, tc.want)
			}
		})
	}
}

func TestItersFor(t *testing.T) {
	tests := []struct {
		target, perCall float64
		want            int
	}{
		{0.25, 0.001, 250}, {0.25, 0.05, 5}, {0.25, 1, 2}, {0.25, 0, 1_000_000}, {1, 0.3, 3}, {1, 1e-9, 1_000_000},
	}
	for _, tc := range tests {
		if got := itersFor(tc.target, tc.perCall); got != tc.want {
			t.Errorf("itersFor(%v, %v) = %d, want %d", tc.target, tc.perCall, got, tc.want)
		}
	}
	if got := slowest([]float64{1, 9, 9, 3, 0, 0, 2, 0, 0}); got != 3 {
		t.Errorf("slowest = %v, want 3 (the wrong counts are not times)", got)
	}
}

func TestRunTargetSeconds(t *testing.T) {
	// A target far below one call's time leaves the minimum of two timed iterations per size,
	// on every rank, whatever -n says.
	cfg := Config{Op: AllReduce, MinBytes: 64, MaxBytes: 256, Factor: 4, Warmup: 0, Iters: 50, Check: 1, TargetSeconds: 1e-12}
	for _, r := range runJob(t, 3, cfg, -1) {
		if r.Iters != 2 || r.Wrong != 0 {
			t.Errorf("size %d: %d iterations, %d wrong; want 2", r.Bytes, r.Iters, r.Wrong)
		}
	}
}

func TestSummarize(t *testing.T) {
	cfg := Config{Op: AllReduce, Iters: 20, Check: 1}
	// 4 ranks, 1 MB: times 100, 200, 300, 400 us; 3 wrong elements on rank 2.
	// [time, wrong, bytes sent] per rank.
	stats := []float64{100e-6, 0, 1e6, 200e-6, 0, 1e6, 300e-6, 3, 1e6, 400e-6, 0, 3e6}
	r := summarize(cfg, "ring", 4, 250000, stats)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }
	if r.Bytes != 1e6 || r.Count != 250000 || !near(r.AvgUs, 250) || !near(r.MinUs, 100) || !near(r.MaxUs, 400) {
		t.Errorf("row %+v", r)
	}
	if !near(r.AlgBW, 4) || !near(r.BusBW, 6) || r.Wrong != 3 || r.RedOp != "sum" || r.Type != "float" {
		t.Errorf("row %+v: want algbw 4, busbw 6, 3 wrong", r)
	}
	if r.SentBytes != 0 {
		t.Errorf("row %+v: bytes sent without Config.ShowSent", r)
	}
	cfg.ShowSent = true
	if r = summarize(cfg, "ring", 4, 250000, stats); r.SentBytes != 1.5e6 {
		t.Errorf("row %+v: want 1.5e6 bytes sent per rank", r)
	}
	r = summarize(Config{Op: AllGather, Iters: 1}, "ps", 4, 250000, stats)
	if !near(r.BusBW, 3) || r.RedOp != "none" || r.CheckString() != "unchecked" {
		t.Errorf("allgather row %+v: want busbw 3, redop none, unchecked", r)
	}
}

var goldenRows = []Row{
	{Bytes: 4096, Count: 1024, Type: "float", RedOp: "sum", Algo: "ring", Iters: 20, AvgUs: 55.994, MinUs: 50.5, MaxUs: 60.25, AlgBW: 0.07315, BusBW: 0.10972, Checks: 1},
	{Bytes: 16384, Count: 4096, Type: "float", RedOp: "sum", Algo: "ring", Iters: 20, AvgUs: 101.31, MinUs: 99, MaxUs: 103, AlgBW: 0.1617, BusBW: 0.2426, Checks: 1, Wrong: 5,
		Attribution: Attribution{Calls: 3, SkewUs: 812.456, LateRank: 2, Culprit: "rank 2"}},
}

func goldenMeta() Meta {
	return Meta{P: 4, Collective: "ring", Op: AllReduce, Notes: []string{"transport=mem"},
		Config: Config{Op: AllReduce, MinBytes: 4096, MaxBytes: 16384, Factor: 4, Warmup: 5, Iters: 20, Check: 1}}
}

func writeTable(t *testing.T, f Format, rows []Row) string {
	t.Helper()
	var b bytes.Buffer
	tab := &Table{W: &b, Format: f, Meta: goldenMeta()}
	if err := tab.Header(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := tab.Row(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Trailer(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTSVFormat(t *testing.T) {
	got := writeTable(t, TSV, goldenRows)
	want := "# hetsync bench P=4 collective=ring op=allreduce\n" +
		"#bytes\tcount\titers\tavg_us\tmin_us\tmax_us\talgbw_GBps\tbusbw_GBps\tcheck\tskew_us\tlate_rank\n" +
		"4096\t1024\t20\t55.99\t50.50\t60.25\t0.0732\t0.1097\tOK\tnan\t-1\n" +
		"16384\t4096\t20\t101.31\t99.00\t103.00\t0.1617\t0.2426\twrong=5\t812.46\t2\n"
	if got != want {
		t.Fatalf("TSV:\n%s\nwant:\n%s", got, want)
	}
	// Parse it the way the comparison harness does: "# " lines are metadata (P= is read
	// from them), a "#" line without the space is the header, rows have as many fields.
	var hdr []string
	p := 0
	sc := bufio.NewScanner(strings.NewReader(got))
	nrows := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# "):
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "P="); ok {
					p, _ = strconv.Atoi(v)
				}
			}
		case strings.HasPrefix(line, "#"):
			hdr = strings.Split(line[1:], "\t")
		default:
			if parts := strings.Split(line, "\t"); len(parts) != len(hdr) {
				t.Errorf("row %q has %d fields, header %d", line, len(parts), len(hdr))
			}
			nrows++
		}
	}
	// The harness's columns come first, in their order; the new ones after them.
	if p != 4 || nrows != 2 || len(hdr) != 11 || hdr[0] != "bytes" || hdr[8] != "check" || hdr[9] != "skew_us" || hdr[10] != "late_rank" {
		t.Errorf("parsed P=%d, %d rows, header %q", p, nrows, hdr)
	}
}

func TestTextFormat(t *testing.T) {
	got := writeTable(t, Text, goldenRows)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	wantPrefix := []string{
		"# hetsync bench: P=4 collective=ring op=allreduce transport=mem",
		"#  minBytes 4096 maxBytes 16384 step: 4(factor) warmup iters: 5 iters: 20 validation: 1",
		"#",
	}
	for i, w := range wantPrefix {
		if lines[i] != w {
			t.Errorf("line %d = %q, want %q", i, lines[i], w)
		}
	}
	wantFields := [][]string{
		{"#", "size", "count", "type", "redop", "algo", "time", "algbw", "busbw", "#wrong", "min", "max", "skew", "late"},
		{"#", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)", "(us)", "(us)", "rank"},
		{"4096", "1024", "float", "sum", "ring", "55.99", "0.07", "0.11", "0", "50.50", "60.25", "N/A", "N/A"},
		{"16384", "4096", "float", "sum", "ring", "101.31", "0.16", "0.24", "5", "99.00", "103.00", "812.46", "2"},
		{"#", "Out", "of", "bounds", "values", ":", "5", "FAILED"},
		{"#", "Avg", "bus", "bandwidth", ":", "0.1762"},
		{"#"},
	}
	if len(lines) != len(wantPrefix)+len(wantFields) {
		t.Fatalf("got %d lines:\n%s", len(lines), got)
	}
	for i, w := range wantFields {
		l := lines[len(wantPrefix)+i]
		if f := strings.Fields(l); strings.Join(f, "|") != strings.Join(w, "|") {
			t.Errorf("line %q: fields %q, want %q", l, f, w)
		}
	}
	// Columns line up: the rows and the header have the same width.
	if w := len(lines[3]); len(lines[5]) != w || len(lines[6]) != w {
		t.Errorf("header and rows differ in width: %d %d %d", w, len(lines[5]), len(lines[6]))
	}
	if !strings.Contains(writeTable(t, Text, goldenRows[:1]), "# Out of bounds values : 0 OK\n") {
		t.Error("trailer of a clean run does not say 0 OK")
	}
}

func TestJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, []Result{NewResult(goldenMeta(), goldenRows)}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			P          int     `json:"p"`
			Collective string  `json:"collective"`
			Op         string  `json:"op"`
			Rows       []Row   `json:"rows"`
			Wrong      int64   `json:"out_of_bounds"`
			OK         bool    `json:"ok"`
			AvgBusBW   float64 `json:"avg_busbw_GBps"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(doc.Results) != 1 {
		t.Fatalf("results: %s", b.String())
	}
	r := doc.Results[0]
	if r.P != 4 || r.Collective != "ring" || r.Op != "allreduce" || r.Wrong != 5 || r.OK || len(r.Rows) != 2 ||
		r.Rows[1] != goldenRows[1] || math.Abs(r.AvgBusBW-0.17616) > 1e-9 {
		t.Errorf("decoded %+v", r)
	}
}

func TestRunSettles(t *testing.T) {
	// Settling makes every rank call the first size the same number of times (or the job
	// would hang on a rank left waiting), then measures as usual.
	cfg := Config{Op: AllReduce, MinBytes: 64, MaxBytes: 1024, Factor: 4, Warmup: 1, Iters: 3, Check: 1, Settle: 20 * time.Millisecond}
	rows := runJob(t, 3, cfg, -1)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, r := range rows {
		if r.Iters != 3 || r.Wrong != 0 {
			t.Errorf("size %d: %d iterations, %d wrong; want 3 and 0", r.Bytes, r.Iters, r.Wrong)
		}
	}
	if err := (Config{Op: AllReduce, MinBytes: 4, MaxBytes: 4, Factor: 2, Iters: 1, Settle: -1}).Validate(2); err == nil || !strings.Contains(err.Error(), "--settle") {
		t.Errorf("negative settle: %v, want an error naming --settle", err)
	}
}

// clearYielding zeroes every element, whatever the length's relation to its piece.
func TestClearYielding(t *testing.T) {
	const piece = 1 << 18
	for _, n := range []int{0, 1, 7, piece - 1, piece, piece + 1, 3*piece + 7} {
		b := make([]float32, n)
		for i := range b {
			b[i] = float32(i + 1)
		}
		clearYielding(b)
		for i, v := range b {
			if v != 0 {
				t.Fatalf("length %d: element %d is %v after clearYielding", n, i, v)
			}
		}
	}
}
