package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRoundRecordJSON(t *testing.T) {
	cases := []struct {
		name string
		rec  RoundRecord
		want string
	}{
		{"minimal", RoundRecord{LateRank: -1}, `{"rank":0,"round":0,"time_s":0,"samples":0,"compute_s":0,"comm_s":0,"wait_s":0,"bytes_sent":0,"bytes_recv":0,"loss":0,"local_steps":0,"late_rank":-1,"late_wait_s":0}`},
		{"evaluated", RoundRecord{Rank: 1, Round: 7, TimeS: 3.52, Samples: 256, ComputeS: 0.31, CommS: 0.02, WaitS: 0.11,
			BytesSent: 1017640, BytesRecv: 1017641, Loss: 0.61, LocalSteps: 4, LateRank: 3, LateWaitS: 0.305, Accuracy: 0.8125, HasAccuracy: true},
			`{"rank":1,"round":7,"time_s":3.52,"samples":256,"compute_s":0.31,"comm_s":0.02,"wait_s":0.11,"bytes_sent":1017640,"bytes_recv":1017641,"loss":0.61,"local_steps":4,"late_rank":3,"late_wait_s":0.305,"accuracy":0.8125}`},
		{"extras", RoundRecord{Rank: 2, Round: 1, Loss: 1e-7, LateRank: 0, LateWaitS: 1e-3, Extra: []Field{{"staleness", 3}, {"version", 12}}},
			`{"rank":2,"round":1,"time_s":0,"samples":0,"compute_s":0,"comm_s":0,"wait_s":0,"bytes_sent":0,"bytes_recv":0,"loss":1e-07,"local_steps":0,"late_rank":0,"late_wait_s":0.001,"staleness":3,"version":12}`},
		{"sent by link", RoundRecord{Rank: 3, Round: 2, BytesSent: 60, LateRank: -1, Sent: LinkBytes{Host: 10, Hosts: 20, Groups: 30}, Extra: []Field{{"version", 1}}},
			`{"rank":3,"round":2,"time_s":0,"samples":0,"compute_s":0,"comm_s":0,"wait_s":0,"bytes_sent":60,"bytes_recv":0,"loss":0,"local_steps":0,"late_rank":-1,"late_wait_s":0,"sent_host":10,"sent_hosts":20,"sent_groups":30,"version":1}`},
		{"zero accuracy still written", RoundRecord{LateRank: -1, HasAccuracy: true},
			`{"rank":0,"round":0,"time_s":0,"samples":0,"compute_s":0,"comm_s":0,"wait_s":0,"bytes_sent":0,"bytes_recv":0,"loss":0,"local_steps":0,"late_rank":-1,"late_wait_s":0,"accuracy":0}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := NewWriter(&buf).WriteRound(&tc.rec); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tc.want+"\n" {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !json.Valid(buf.Bytes()) {
				t.Fatal("not valid JSON")
			}
			back, err := ReadRounds(&buf, "buf")
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != 1 || !reflect.DeepEqual(back[0], tc.rec) {
				t.Fatalf("round trip: got %+v, want %+v", back, tc.rec)
			}
		})
	}
}

// TestRoundRecordWithoutLateFields reads lines written before late_rank and late_wait_s
// existed: they mean "waited for no one".
func TestRoundRecordWithoutLateFields(t *testing.T) {
	cases := []struct {
		name, line           string
		wantRank, wantExtras int
		wantWait             float64
	}{
		{"both absent", `{"rank":1,"round":2,"wait_s":0.5}`, -1, 0, 0},
		{"wait absent", `{"rank":1,"round":2,"late_rank":3}`, 3, 0, 0},
		{"rank absent", `{"rank":1,"round":2,"late_wait_s":0.25}`, -1, 0, 0.25},
		{"both present, with an extra", `{"rank":0,"round":0,"late_rank":0,"late_wait_s":1.5,"clock":4}`, 0, 1, 1.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := ReadRounds(strings.NewReader(tc.line), "old.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			r := recs[0]
			if r.LateRank != tc.wantRank || r.LateWaitS != tc.wantWait || len(r.Extra) != tc.wantExtras {
				t.Fatalf("late_rank %d late_wait_s %v extras %v; want %d, %v and %d extras", r.LateRank, r.LateWaitS, r.Extra, tc.wantRank, tc.wantWait, tc.wantExtras)
			}
		})
	}
	if _, err := ReadRounds(strings.NewReader(`{"rank":1,"round":2,"late_rank":-3}`), "bad.jsonl"); err == nil || !strings.Contains(err.Error(), "bad.jsonl:1") {
		t.Fatalf("late_rank -3 read as %v, want an error naming bad.jsonl:1", err)
	}
}

func TestNonFiniteLoss(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, loss := range []float64{math.NaN(), math.Inf(1)} {
		if err := w.WriteRound(&RoundRecord{Rank: 0, Round: 1, Loss: loss}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Count(buf.String(), `"loss":null`) != 2 {
		t.Fatalf("non-finite loss not written as null: %s", buf.String())
	}
	back, err := ReadRounds(&buf, "buf")
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back[0].Loss) || !math.IsNaN(back[1].Loss) {
		t.Fatalf("null loss read back as %v, %v; want NaN", back[0].Loss, back[1].Loss)
	}
}

func TestRoundRecordValidate(t *testing.T) {
	cases := []struct {
		name string
		rec  RoundRecord
		want string
	}{
		{"negative rank", RoundRecord{Rank: -1}, "rank -1"},
		{"negative round", RoundRecord{Round: -2}, "round -2"},
		{"negative bytes", RoundRecord{BytesSent: -1}, "negative counter"},
		{"NaN time", RoundRecord{TimeS: math.NaN()}, "time_s = NaN"},
		{"negative wait", RoundRecord{WaitS: -0.5}, "wait_s = -0.5"},
		{"infinite compute", RoundRecord{ComputeS: math.Inf(1)}, "compute_s = +Inf"},
		{"late rank below -1", RoundRecord{LateRank: -2}, "late_rank -2"},
		{"negative late wait", RoundRecord{LateRank: 1, LateWaitS: -0.1}, "late_wait_s = -0.1"},
		{"NaN late wait", RoundRecord{LateRank: 1, LateWaitS: math.NaN()}, "late_wait_s = NaN"},
		{"infinite late wait", RoundRecord{LateRank: 1, LateWaitS: math.Inf(1)}, "late_wait_s = +Inf"},
		{"reserved extra late_rank", RoundRecord{Extra: []Field{{"late_rank", 1}}}, "collides"},
		{"reserved extra", RoundRecord{Extra: []Field{{"loss", 1}}}, "collides"},
		{"duplicate extra", RoundRecord{Extra: []Field{{"a", 1}, {"a", 2}}}, "given twice"},
		{"bad extra key", RoundRecord{Extra: []Field{{`x"y`, 1}}}, "keys are"},
		{"empty extra key", RoundRecord{Extra: []Field{{"", 1}}}, "keys are"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := NewWriter(&buf).WriteRound(&tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("invalid record was written: %s", buf.String())
			}
		})
	}
}

func TestEvalRecordJSON(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	recs := []EvalRecord{{TimeS: 12.5, Round: 40, Accuracy: 0.8031, Loss: 0.55}, {TimeS: 0, Round: 0, Accuracy: 0.1, Loss: math.NaN()}}
	for i := range recs {
		if err := w.WriteEval(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"time_s":12.5,"round":40,"accuracy":0.8031,"loss":0.55}` + "\n" + `{"time_s":0,"round":0,"accuracy":0.1,"loss":null}` + "\n"
	if buf.String() != want {
		t.Fatalf("got\n%swant\n%s", buf.String(), want)
	}
	back, err := ReadEvals(&buf, "eval")
	if err != nil {
		t.Fatal(err)
	}
	if back[0] != recs[0] || back[1].Accuracy != 0.1 || !math.IsNaN(back[1].Loss) {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestReadErrorsNameTheLine(t *testing.T) {
	cases := []struct {
		name, input, want string
		evals             bool
	}{
		{"bad json", `{"rank":0,"round":0}` + "\n\n" + `{"rank":1,`, "runs/x/metrics.jsonl:3", false},
		{"missing round", `{"rank":0}`, `missing "round"`, false},
		{"string rank", `{"rank":"a","round":0}`, `field "rank"`, false},
		{"string extra", `{"rank":0,"round":0,"phase":"x"}`, `field "phase"`, false},
		{"eval missing accuracy", `{"time_s":1,"round":0}`, `missing "accuracy"`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.evals {
				_, err = ReadEvals(strings.NewReader(tc.input), "runs/x/metrics.jsonl")
			} else {
				_, err = ReadRounds(strings.NewReader(tc.input), "runs/x/metrics.jsonl")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "runs/x/metrics.jsonl") {
				t.Fatalf("got %v, want an error naming the file and containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteRaw(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteRaw([]byte(` {"rank":3,"round":1} `)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "[1]", "{\"a\":1}\n{\"b\":2}", `{"a":`} {
		if err := w.WriteRaw([]byte(bad)); err == nil {
			t.Errorf("WriteRaw(%q) accepted", bad)
		}
	}
	if buf.String() != `{"rank":3,"round":1}`+"\n" {
		t.Fatalf("got %q", buf.String())
	}
}

func TestWriterAllocs(t *testing.T) {
	w := NewWriter(io.Discard)
	rec := RoundRecord{Rank: 3, Round: 99, TimeS: 123.456, Samples: 64, ComputeS: 0.1, CommS: 0.2, WaitS: 0.3,
		BytesSent: 1 << 20, BytesRecv: 1 << 20, Loss: 0.5, LocalSteps: 2, Accuracy: 0.9, HasAccuracy: true,
		Extra: []Field{{"staleness", 2}}}
	ev := EvalRecord{TimeS: 1, Round: 2, Accuracy: 0.5, Loss: 1}
	if a := testing.AllocsPerRun(100, func() { w.WriteRound(&rec) }); a != 0 {
		t.Errorf("WriteRound allocates %.1f times per record, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { w.WriteEval(&ev) }); a != 0 {
		t.Errorf("WriteEval allocates %.1f times per record, want 0", a)
	}
}

func BenchmarkWriteRound(b *testing.B) {
	w := NewWriter(io.Discard)
	rec := RoundRecord{Rank: 3, Round: 99, TimeS: 123.456, Samples: 64, ComputeS: 0.1, CommS: 0.2, WaitS: 0.3,
		BytesSent: 1 << 20, BytesRecv: 1 << 20, Loss: 0.5, LocalSteps: 2}
	b.ReportAllocs()
	for b.Loop() {
		rec.Round++
		w.WriteRound(&rec)
	}
}

func rr(rank, round int, t, samples, compute, comm, wait float64, sent, recv int64) RoundRecord {
	return RoundRecord{Rank: rank, Round: round, TimeS: t, Samples: int(samples), ComputeS: compute, CommS: comm, WaitS: wait,
		BytesSent: sent, BytesRecv: recv, LocalSteps: 1}
}

func TestSummarize(t *testing.T) {
	twoRanks := []RoundRecord{
		rr(0, 0, 1, 64, 0.5, 0.25, 0.25, 1e6, 1e6),
		rr(1, 0, 1, 64, 0.9, 0.1, 0, 1e6, 1e6),
		rr(0, 1, 2, 64, 0.5, 0.25, 0.25, 1e6, 1e6),
		rr(1, 1, 2, 64, 0.9, 0.1, 0, 1e6, 1e6),
		rr(0, 2, 4, 64, 1, 0.5, 0.5, 1e6, 1e6),
		rr(1, 2, 3, 64, 0.9, 0.1, 0, 1e6, 1e6), // rank 1 finished earlier
	}
	cases := []struct {
		name      string
		rounds    []RoundRecord
		evals     []EvalRecord
		wantTTA   map[string]float64
		wantFinal float64
		wantBest  float64
		check     func(t *testing.T, s Summary)
	}{
		{
			name:   "two ranks",
			rounds: twoRanks,
			evals: []EvalRecord{
				{TimeS: 1, Round: 0, Accuracy: 0.72},
				{TimeS: 2, Round: 1, Accuracy: 0.80}, // exactly at the target: reached
				{TimeS: 4, Round: 2, Accuracy: 0.79},
			},
			wantTTA:   map[string]float64{"0.70": 1, "0.75": 2, "0.80": 2},
			wantFinal: 0.79, wantBest: 0.80,
			check: func(t *testing.T, s Summary) {
				want := struct {
					ranks, rounds         int
					wall, thr, traffic    float64
					samples, sent, recv   int64
					r0ratio, r0esync      float64
					r1ratio, r1esync      float64
					r0elapsed, r1elapsed  float64
					r0rounds, r1rounds    int
					meanComputation, sMBs float64
				}{2, 3, 4, 384.0 / 4, 12e6 / 1e6 / 4, 384, 6e6, 6e6, 2.0 / 4, 1 - 2.0/4, 2.7 / 3, 1 - 0.3/3, 4, 3, 3, 3,
					(2.0/4 + 2.7/3) / 2, 6e6 / 1e6 / 4}
				got := want
				got.ranks, got.rounds, got.wall, got.thr, got.traffic = s.Ranks, s.Rounds, s.WallS, s.Throughput, s.TrafficMBps
				got.samples, got.sent, got.recv = s.Samples, s.BytesSent, s.BytesRecv
				got.r0ratio, got.r0esync = s.PerRank[0].ComputationRatio, s.PerRank[0].ESyncComputingRatio
				got.r1ratio, got.r1esync = s.PerRank[1].ComputationRatio, s.PerRank[1].ESyncComputingRatio
				got.r0elapsed, got.r1elapsed = s.PerRank[0].ElapsedS, s.PerRank[1].ElapsedS
				got.r0rounds, got.r1rounds = s.PerRank[0].Rounds, s.PerRank[1].Rounds
				got.meanComputation, got.sMBs = s.MeanComputation, s.SentMBps
				if !approxEqual(got, want) {
					t.Fatalf("got  %+v\nwant %+v", got, want)
				}
			},
		},
		{
			name:    "no evaluations",
			rounds:  twoRanks,
			wantTTA: map[string]float64{},
		},
		{
			name:   "unsorted evals, NaN skipped, all targets",
			rounds: twoRanks,
			evals: []EvalRecord{
				{TimeS: 3, Round: 2, Accuracy: 0.91},
				{TimeS: 0.5, Round: 0, Accuracy: math.NaN()},
				{TimeS: 1, Round: 0, Accuracy: 0.86},
				{TimeS: 2, Round: 1, Accuracy: 0.5},
			},
			wantTTA:   map[string]float64{"0.70": 1, "0.75": 1, "0.80": 1, "0.85": 1, "0.90": 3},
			wantFinal: 0.91, wantBest: 0.91,
			check: func(t *testing.T, s Summary) {
				if s.Evaluations != 3 {
					t.Fatalf("evaluations = %d, want 3 (NaN dropped)", s.Evaluations)
				}
			},
		},
		{
			name:    "empty",
			wantTTA: map[string]float64{},
			check: func(t *testing.T, s Summary) {
				if s.WallS != 0 || s.Throughput != 0 || s.TrafficMBps != 0 || len(s.PerRank) != 0 || s.MeanComputation != 0 {
					t.Fatalf("empty summary has values: %+v", s)
				}
			},
		},
		{
			name:      "evals only: wall from the last eval",
			evals:     []EvalRecord{{TimeS: 5, Accuracy: 0.7}},
			wantTTA:   map[string]float64{"0.70": 5},
			wantFinal: 0.7, wantBest: 0.7,
			check: func(t *testing.T, s Summary) {
				if s.WallS != 5 {
					t.Fatalf("wall %v, want 5", s.WallS)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]RoundRecord(nil), tc.rounds...)
			s := Summarize(map[string]string{"sync": "esync"}, tc.rounds, tc.evals)
			if !reflect.DeepEqual(s.TimeToAccuracy, tc.wantTTA) {
				t.Fatalf("time_to_accuracy %v, want %v", s.TimeToAccuracy, tc.wantTTA)
			}
			if s.FinalAccuracy != tc.wantFinal || s.BestAccuracy != tc.wantBest {
				t.Fatalf("final %v best %v, want %v %v", s.FinalAccuracy, s.BestAccuracy, tc.wantFinal, tc.wantBest)
			}
			if !reflect.DeepEqual(in, tc.rounds) {
				t.Fatal("Summarize modified its input")
			}
			if _, err := json.Marshal(s); err != nil {
				t.Fatalf("summary does not encode: %v", err)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// approxEqual compares two structs of int and float64 fields, floats to 1e-12 relative.
func approxEqual(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		x, y := va.Field(i), vb.Field(i)
		if x.Kind() == reflect.Float64 {
			if math.Abs(x.Float()-y.Float()) > 1e-12*math.Max(1, math.Abs(y.Float())) {
				return false
			}
		} else if x.Int() != y.Int() {
			return false
		}
	}
	return true
}

// TestSummarizeLinkBytes: summary.json's sent_by_link is every rank's rounds' bytes by class
// of link summed, per rank and over the job, and absent for a run that counted none.
func TestSummarizeLinkBytes(t *testing.T) {
	rounds := []RoundRecord{
		{Rank: 0, Round: 0, LateRank: -1, Sent: LinkBytes{Host: 100, Hosts: 7}},
		{Rank: 0, Round: 1, LateRank: -1, Sent: LinkBytes{Host: 100, Groups: 5}},
		{Rank: 1, Round: 0, LateRank: -1, Sent: LinkBytes{Hosts: 40}},
		{Rank: 2, Round: 0, LateRank: -1},
	}
	s := Summarize(nil, rounds, nil)
	if s.SentByLink == nil || *s.SentByLink != (LinkBytes{Host: 200, Hosts: 47, Groups: 5}) {
		t.Fatalf("job sent_by_link %+v, want {200 47 5}", s.SentByLink)
	}
	want := []*LinkBytes{{Host: 200, Hosts: 7, Groups: 5}, {Hosts: 40}, nil}
	for r, w := range want {
		got := s.PerRank[r].SentByLink
		if (got == nil) != (w == nil) || (got != nil && *got != *w) {
			t.Errorf("rank %d: sent_by_link %+v, want %+v", r, got, w)
		}
	}
	b, err := json.Marshal(Summarize(nil, rounds[3:], nil))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("sent_by_link")) {
		t.Errorf("a run that counted no link bytes writes sent_by_link: %s", b)
	}
}

func TestSummaryJSONDivergedLoss(t *testing.T) {
	s := Summarize(nil, nil, []EvalRecord{{TimeS: 1, Accuracy: 0.1, Loss: math.NaN()}})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"final_loss":null`) || !strings.Contains(string(b), `"time_to_accuracy":{}`) {
		t.Fatalf("got %s", b)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back.FinalLoss) || back.FinalAccuracy != 0.1 || back.Evaluations != 1 {
		t.Fatalf("read back %+v", back)
	}
}

func TestRunDir(t *testing.T) {
	root := t.TempDir()
	path := RunPath(filepath.Join(root, "runs"), "esync", time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC))
	if filepath.Base(path) != "esync-20261122-010203" {
		t.Fatalf("RunPath = %s", path)
	}
	cfg := map[string]any{"sync": "esync", "np": 2}
	d, err := CreateRunDir(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []RoundRecord{rr(0, 0, 1, 64, 0.5, 0.5, 0, 10, 20), rr(1, 0, 2, 64, 1, 1, 0, 30, 40)} {
		if err := d.Metrics().WriteRound(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Evals().WriteEval(&EvalRecord{TimeS: 2, Round: 0, Accuracy: 0.75, Loss: 0.7}); err != nil {
		t.Fatal(err)
	}
	lf, err := d.RankLog(1)
	if err != nil {
		t.Fatal(err)
	}
	lf.Close()
	s, err := d.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if s.Ranks != 2 || s.WallS != 2 || s.BytesSent != 40 || s.TimeToAccuracy["0.75"] != 2 {
		t.Fatalf("summary %+v", s)
	}
	for _, f := range []string{ConfigFile, MetricsFile, EvalFile, SummaryFile, filepath.Join(LogsDir, "rank-1.log")} {
		if _, err := os.Stat(filepath.Join(path, f)); err != nil {
			t.Fatalf("missing %s: %v", f, err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(path, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Config map[string]any     `json:"config"`
		TTA    map[string]float64 `json:"time_to_accuracy"`
		Thr    float64            `json:"throughput_samples_per_s"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Config["sync"] != "esync" || back.TTA["0.70"] != 2 || back.Thr != 64 {
		t.Fatalf("summary.json: %s", raw)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// A second run in the same directory is refused, naming it.
	if _, err := CreateRunDir(path, cfg); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "already holds a run") {
		t.Fatalf("CreateRunDir over an existing run: %v", err)
	}
	if _, err := CreateRunDir(filepath.Join(root, "bad"), map[string]any{"f": func() {}}); err == nil {
		t.Fatal("unencodable config accepted")
	}
}

func TestLoadRunErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no config", map[string]string{MetricsFile: ""}, ConfigFile},
		{"bad config", map[string]string{ConfigFile: "{", MetricsFile: ""}, "not valid JSON"},
		{"no metrics", map[string]string{ConfigFile: "{}"}, MetricsFile},
		{"bad metrics line", map[string]string{ConfigFile: "{}", MetricsFile: `{"rank":0,"round":0}` + "\nxx\n"}, MetricsFile + ":2"},
		{"bad eval line", map[string]string{ConfigFile: "{}", MetricsFile: "", EvalFile: "{}"}, EvalFile + ":1"},
		{"no eval is fine", map[string]string{ConfigFile: "{}", MetricsFile: `{"rank":0,"round":0}`}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, rounds, _, err := LoadRun(dir)
			if tc.want == "" {
				if err != nil || len(rounds) != 1 {
					t.Fatalf("LoadRun: %v, %d rounds", err, len(rounds))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if tc.name == "no config" && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("missing config error does not wrap ErrNotExist: %v", err)
			}
		})
	}
}
