package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
)

// RoundRecord is one rank's account of one round: one JSON line in metrics.jsonl.
type RoundRecord struct {
	Rank       int     `json:"rank"`
	Round      int     `json:"round"`
	TimeS      float64 `json:"time_s"`    // wall seconds since training start, at the end of the round
	Samples    int     `json:"samples"`   // samples trained this round (Σ batch sizes)
	ComputeS   float64 `json:"compute_s"` // forward/backward/local update, batch loading, injected sleep
	CommS      float64 `json:"comm_s"`    // moving bytes (collectives, push/pull)
	WaitS      float64 `json:"wait_s"`    // blocked on other ranks (barriers, READY checks)
	BytesSent  int64   `json:"bytes_sent"`
	BytesRecv  int64   `json:"bytes_recv"`
	Loss       float64 `json:"loss"` // mean training loss of the round; NaN is written as null
	LocalSteps int     `json:"local_steps"`
	// LateRank is the rank this rank waited for longest in the round's collectives, -1 when it
	// waited for none; LateWaitS is how long it waited for that rank, in seconds. Files written
	// before these fields existed read as -1 and 0.
	LateRank  int     `json:"late_rank"`
	LateWaitS float64 `json:"late_wait_s"`
	// Accuracy is written only when HasAccuracy is set (the round was evaluated).
	Accuracy    float64 `json:"accuracy,omitempty"`
	HasAccuracy bool    `json:"-"`
	// Sent is BytesSent's share of the round by class of link, as the trainer counts it where
	// its communicator and services send (LinkBytes). It is written only when not zero, and
	// files written before it existed read as zero.
	Sent LinkBytes `json:"-"`
	// Extra holds strategy-specific numbers (staleness, version, clock, …) written as further
	// top-level keys. Their keys must not collide with the fixed ones above.
	Extra []Field `json:"-"`
}

// Field is one strategy-specific number of a RoundRecord.
type Field struct {
	Key   string
	Value float64
}

// EvalRecord is one evaluation of a global-model snapshot on the test set (rank 0): one JSON
// line in eval.jsonl.
type EvalRecord struct {
	TimeS    float64 `json:"time_s"` // wall seconds since training start when the snapshot was taken
	Round    int     `json:"round"`  // global round (or server version) of the snapshot
	Accuracy float64 `json:"accuracy"`
	Loss     float64 `json:"loss"`
}

// roundKeys are the fixed keys of a RoundRecord, in output order.
var roundKeys = []string{"rank", "round", "time_s", "samples", "compute_s", "comm_s", "wait_s",
	"bytes_sent", "bytes_recv", "loss", "local_steps", "late_rank", "late_wait_s", "accuracy",
	"sent_host", "sent_hosts", "sent_groups"}

// Validate reports negative counters, times that are negative or not finite, and Extra keys
// that are empty, duplicated or reserved.
func (r *RoundRecord) Validate() error {
	if err := r.check(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (r *RoundRecord) check() error {
	switch {
	case r.Rank < 0:
		return fmt.Errorf("rank %d < 0", r.Rank)
	case r.Round < 0:
		return fmt.Errorf("rank %d: round %d < 0", r.Rank, r.Round)
	case r.Samples < 0 || r.BytesSent < 0 || r.BytesRecv < 0 || r.LocalSteps < 0 || r.Sent.negative():
		return fmt.Errorf("rank %d round %d: negative counter", r.Rank, r.Round)
	case r.LateRank < -1:
		return fmt.Errorf("rank %d round %d: late_rank %d, want a rank or -1 for none", r.Rank, r.Round, r.LateRank)
	}
	for _, d := range [...]struct {
		name string
		v    float64
	}{{"time_s", r.TimeS}, {"compute_s", r.ComputeS}, {"comm_s", r.CommS}, {"wait_s", r.WaitS}, {"late_wait_s", r.LateWaitS}} {
		if !(d.v >= 0) || math.IsInf(d.v, 0) {
			return fmt.Errorf("rank %d round %d: %s = %v, want a finite duration ≥ 0", r.Rank, r.Round, d.name, d.v)
		}
	}
	for i, f := range r.Extra {
		if f.Key == "" || !plainKey(f.Key) {
			return fmt.Errorf("rank %d round %d: extra field %q: keys are [a-z0-9_]+", r.Rank, r.Round, f.Key)
		}
		if slices.Contains(roundKeys, f.Key) {
			return fmt.Errorf("rank %d round %d: extra field %q collides with a fixed field", r.Rank, r.Round, f.Key)
		}
		for _, g := range r.Extra[:i] {
			if g.Key == f.Key {
				return fmt.Errorf("rank %d round %d: extra field %q given twice", r.Rank, r.Round, f.Key)
			}
		}
	}
	return nil
}

// check reports an evaluation with a negative round, a time that is negative or not finite,
// or an accuracy outside [0, 1].
func (e *EvalRecord) check() error {
	switch {
	case e.Round < 0:
		return fmt.Errorf("evaluation of round %d: round < 0", e.Round)
	case !(e.TimeS >= 0) || math.IsInf(e.TimeS, 0):
		return fmt.Errorf("evaluation of round %d: time_s = %v, want a finite time ≥ 0", e.Round, e.TimeS)
	case !(e.Accuracy >= 0 && e.Accuracy <= 1):
		return fmt.Errorf("evaluation of round %d: accuracy = %v, want a fraction in [0, 1]", e.Round, e.Accuracy)
	}
	return nil
}

// plainKey keeps extra keys free of characters that would need JSON escaping.
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// AppendJSON appends r as one JSON object (no newline). Non-finite floats become null.
func (r *RoundRecord) AppendJSON(b []byte) []byte {
	b = append(b, `{"rank":`...)
	b = strconv.AppendInt(b, int64(r.Rank), 10)
	b = append(b, `,"round":`...)
	b = strconv.AppendInt(b, int64(r.Round), 10)
	b = appendFloatField(b, "time_s", r.TimeS)
	b = append(b, `,"samples":`...)
	b = strconv.AppendInt(b, int64(r.Samples), 10)
	b = appendFloatField(b, "compute_s", r.ComputeS)
	b = appendFloatField(b, "comm_s", r.CommS)
	b = appendFloatField(b, "wait_s", r.WaitS)
	b = append(b, `,"bytes_sent":`...)
	b = strconv.AppendInt(b, r.BytesSent, 10)
	b = append(b, `,"bytes_recv":`...)
	b = strconv.AppendInt(b, r.BytesRecv, 10)
	b = appendFloatField(b, "loss", r.Loss)
	b = append(b, `,"local_steps":`...)
	b = strconv.AppendInt(b, int64(r.LocalSteps), 10)
	b = append(b, `,"late_rank":`...)
	b = strconv.AppendInt(b, int64(r.LateRank), 10)
	b = appendFloatField(b, "late_wait_s", r.LateWaitS)
	if r.HasAccuracy {
		b = appendFloatField(b, "accuracy", r.Accuracy)
	}
	if r.Sent != (LinkBytes{}) {
		for _, f := range r.Sent.fields() {
			b = append(b, ',', '"')
			b = append(b, f.key...)
			b = append(b, '"', ':')
			b = strconv.AppendInt(b, *f.v, 10)
		}
	}
	for _, f := range r.Extra {
		b = appendFloatField(b, f.Key, f.Value)
	}
	return append(b, '}')
}

// AppendJSON appends e as one JSON object (no newline).
func (e *EvalRecord) AppendJSON(b []byte) []byte {
	b = append(b, `{"time_s":`...)
	b = appendFloat(b, e.TimeS)
	b = append(b, `,"round":`...)
	b = strconv.AppendInt(b, int64(e.Round), 10)
	b = appendFloatField(b, "accuracy", e.Accuracy)
	b = appendFloatField(b, "loss", e.Loss)
	return append(b, '}')
}

func appendFloatField(b []byte, key string, v float64) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendFloat(b, v)
}

func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// UnmarshalJSON reads a line written by AppendJSON: unknown keys become Extra fields and null
// numbers become NaN.
func (r *RoundRecord) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*r = RoundRecord{LateRank: -1}
	ints := map[string]*int{"rank": &r.Rank, "round": &r.Round, "samples": &r.Samples, "local_steps": &r.LocalSteps,
		"late_rank": &r.LateRank}
	int64s := map[string]*int64{"bytes_sent": &r.BytesSent, "bytes_recv": &r.BytesRecv}
	for _, f := range r.Sent.fields() {
		int64s[f.key] = f.v
	}
	floats := map[string]*float64{"time_s": &r.TimeS, "compute_s": &r.ComputeS, "comm_s": &r.CommS,
		"wait_s": &r.WaitS, "late_wait_s": &r.LateWaitS, "loss": &r.Loss, "accuracy": &r.Accuracy}
	for _, k := range []string{"rank", "round"} {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("missing %q", k)
		}
	}
	for k, raw := range m {
		var err error
		switch {
		case ints[k] != nil:
			err = json.Unmarshal(raw, ints[k])
		case int64s[k] != nil:
			err = json.Unmarshal(raw, int64s[k])
		case floats[k] != nil:
			*floats[k], err = parseFloat(raw)
			if k == "accuracy" {
				r.HasAccuracy = true
			}
		default:
			var v float64
			v, err = parseFloat(raw)
			r.Extra = append(r.Extra, Field{Key: k, Value: v})
		}
		if err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	slices.SortFunc(r.Extra, func(a, b Field) int { return cmpString(a.Key, b.Key) })
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// UnmarshalJSON accepts null for the floats (NaN).
func (e *EvalRecord) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*e = EvalRecord{}
	for _, k := range []string{"time_s", "round", "accuracy"} {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("missing %q", k)
		}
	}
	var err error
	if e.TimeS, err = parseFloat(m["time_s"]); err != nil {
		return fmt.Errorf("field \"time_s\": %w", err)
	}
	if err = json.Unmarshal(m["round"], &e.Round); err != nil {
		return fmt.Errorf("field \"round\": %w", err)
	}
	if e.Accuracy, err = parseFloat(m["accuracy"]); err != nil {
		return fmt.Errorf("field \"accuracy\": %w", err)
	}
	if raw, ok := m["loss"]; ok {
		if e.Loss, err = parseFloat(raw); err != nil {
			return fmt.Errorf("field \"loss\": %w", err)
		}
	}
	return nil
}

func parseFloat(raw json.RawMessage) (float64, error) {
	if string(raw) == "null" {
		return math.NaN(), nil
	}
	var v float64
	err := json.Unmarshal(raw, &v)
	return v, err
}

// Writer appends JSON lines to an io.Writer. It reuses one buffer, so writing a record
// allocates nothing once the buffer has grown; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer appending to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, buf: make([]byte, 0, 512)} }

// WriteRound validates r and writes it as one line.
func (w *Writer) WriteRound(r *RoundRecord) error {
	if err := r.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(r.AppendJSON(w.buf[:0]), '\n')
	if _, err := w.w.Write(w.buf); err != nil {
		return fmt.Errorf("metrics: rank %d round %d: %w", r.Rank, r.Round, err)
	}
	return nil
}

// WriteEval writes e as one line.
func (w *Writer) WriteEval(e *EvalRecord) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(e.AppendJSON(w.buf[:0]), '\n')
	if _, err := w.w.Write(w.buf); err != nil {
		return fmt.Errorf("metrics: eval round %d: %w", e.Round, err)
	}
	return nil
}

// WriteRaw writes one already-encoded JSON line (for example a line gathered from another
// rank), adding the newline when missing. The line must be a single JSON object.
func (w *Writer) WriteRaw(line []byte) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || bytes.IndexByte(line, '\n') >= 0 || !json.Valid(line) {
		return fmt.Errorf("metrics: WriteRaw: not a single-line JSON object: %.60q", line)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(append(w.buf[:0], line...), '\n')
	_, err := w.w.Write(w.buf)
	return err
}

// ReadRounds parses metrics.jsonl; a line that is not JSON or not a valid record (RoundRecord.Validate)
// is an error naming the line. name is used in errors (a file name).
func ReadRounds(r io.Reader, name string) ([]RoundRecord, error) {
	return readRounds(r, name, false)
}

// readRounds is ReadRounds; torn skips a torn last line (readLines).
func readRounds(r io.Reader, name string, torn bool) ([]RoundRecord, error) {
	return readRecords[RoundRecord](r, name, torn)
}

// ReadEvals parses eval.jsonl; a line that is not JSON or not a valid evaluation (a negative
// round or time, an accuracy outside [0, 1]) is an error naming the line.
func ReadEvals(r io.Reader, name string) ([]EvalRecord, error) {
	return readEvals(r, name, false)
}

// readEvals is ReadEvals; torn skips a torn last line (readLines).
func readEvals(r io.Reader, name string, torn bool) ([]EvalRecord, error) {
	return readRecords[EvalRecord](r, name, torn)
}

// readRecords parses one JSON record of type T per line and checks each; torn skips a torn
// last line (readLines).
func readRecords[T any, PT interface {
	*T
	check() error
}](r io.Reader, name string, torn bool) ([]T, error) {
	var out []T
	err := readLines(r, name, torn, func(line []byte) error {
		var rec T
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		if err := PT(&rec).check(); err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// maxLine bounds one JSON line, so a file without newlines cannot take all memory.
const maxLine = 16 << 20

// readLines calls each for every non-blank line. With torn set, a last line that has no
// newline and is not JSON is skipped rather than an error: it is what a writer killed in the
// middle of a line leaves in a file written as the job runs, and the lines before it are what
// the run measured.
func readLines(r io.Reader, name string, torn bool, each func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		raw, rerr := readLine(br)
		if rerr != nil && rerr != io.EOF {
			return fmt.Errorf("metrics: %s:%d: %w", name, n, rerr)
		}
		line := bytes.TrimSpace(raw)
		skip := torn && rerr == io.EOF && len(raw) > 0 && raw[len(raw)-1] != '\n' && !json.Valid(line)
		if len(line) > 0 && !skip {
			if err := each(line); err != nil {
				return fmt.Errorf("metrics: %s:%d: %w", name, n, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
	}
}

// readLine reads up to and including the next newline, or to the end of input (io.EOF).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxLine)
		}
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}
