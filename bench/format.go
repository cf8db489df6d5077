package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Meta describes one table: the job and what was measured.
type Meta struct {
	P          int    `json:"p"`
	Collective string `json:"collective"` // the algorithm's name
	Op         Op     `json:"-"`
	Config     Config `json:"-"`
	// Notes are extra "key=value" facts (transport, codec, security) for the text header.
	Notes []string `json:"notes,omitempty"`
}

// Result is one table as JSON.
type Result struct {
	Meta
	OpName    string  `json:"op"`
	MinBytes  int64   `json:"min_bytes"`
	MaxBytes  int64   `json:"max_bytes"`
	Factor    int     `json:"step_factor"`
	Warmup    int     `json:"warmup_iters"`
	Iters     int     `json:"iters"`
	TargetSec float64 `json:"target_sec,omitempty"`
	Check     int     `json:"check_iters"`
	Rows      []Row   `json:"rows"`
	Wrong     int64   `json:"out_of_bounds"`
	OK        bool    `json:"ok"`
	AvgBusBW  float64 `json:"avg_busbw_GBps"`
}

// NewResult bundles a table's metadata and rows.
func NewResult(m Meta, rows []Row) Result {
	wrong, avg := Totals(rows)
	checked := m.Config.Check > 0
	return Result{
		Meta: m, OpName: m.Op.String(), MinBytes: m.Config.MinBytes, MaxBytes: m.Config.MaxBytes,
		Factor: m.Config.Factor, Warmup: m.Config.Warmup, Iters: m.Config.Iters, TargetSec: m.Config.TargetSeconds, Check: m.Config.Check,
		Rows: rows, Wrong: wrong, OK: checked && wrong == 0, AvgBusBW: avg,
	}
}

// Totals returns the wrong elements over all rows and the mean busbw, as nccl-tests' trailer.
func Totals(rows []Row) (wrong int64, avgBusBW float64) {
	for _, r := range rows {
		wrong += r.Wrong
		avgBusBW += r.BusBW
	}
	if len(rows) > 0 {
		avgBusBW /= float64(len(rows))
	}
	return wrong, avgBusBW
}

// Format is an output format of the benchmark table.
type Format string

// Formats.
const (
	Text Format = "text"
	TSV  Format = "tsv"
)

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case Text, TSV:
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q (known: text, tsv)", s)
}

// Table writes one benchmark table in a format, row by row: Header, then Row for each size as
// it is measured, then Trailer.
type Table struct {
	W      io.Writer
	Format Format
	Meta   Meta
	rows   []Row
}

const (
	textCols = "%12s  %12s  %8s  %6s  %14s  %10s  %7s  %7s  %7s  %10s  %10s  %10s  %5s\n"
	textHdr  = "#%11s  %12s  %8s  %6s  %14s  %10s  %7s  %7s  %7s  %10s  %10s  %10s  %5s\n" // '#' takes one column
)

// Header writes the lines before the rows.
func (t *Table) Header() error {
	m := t.Meta
	var b strings.Builder
	switch t.Format {
	case TSV:
		// Exactly one "# " line, carrying P=: the peers' summarize.py reads P from it.
		fmt.Fprintf(&b, "# hetsync bench P=%d collective=%s op=%s\n", m.P, m.Collective, m.Op)
		// The harness reads columns by name: new ones go after check.
		b.WriteString("#bytes\tcount\titers\tavg_us\tmin_us\tmax_us\talgbw_GBps\tbusbw_GBps\tcheck\tskew_us\tlate_rank")
		if m.Config.ShowSent {
			b.WriteString("\tsent_B")
		}
		b.WriteString("\n")
	default:
		c := m.Config
		fmt.Fprintf(&b, "# hetsync bench: P=%d collective=%s op=%s", m.P, m.Collective, m.Op)
		for _, n := range m.Notes {
			b.WriteString(" " + n)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "#  minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d validation: %d",
			c.MinBytes, c.MaxBytes, c.Factor, c.Warmup, c.Iters, c.Check)
		if c.TargetSeconds > 0 {
			fmt.Fprintf(&b, " target: %gs", c.TargetSeconds)
		}
		b.WriteString("\n")
		b.WriteString("#\n")
		hdr := [2][]any{
			{"      size", "count", "type", "redop", "algo", "time", "algbw", "busbw", "#wrong", "min", "max", "skew", "late"},
			{"       (B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "rank"},
		}
		for i, sent := range [2]string{"sent/rank", "(B)"} {
			line := fmt.Sprintf(textHdr, hdr[i]...)
			if c.ShowSent {
				line = strings.TrimSuffix(line, "\n") + fmt.Sprintf("  %12s\n", sent)
			}
			b.WriteString(line)
		}
	}
	_, err := io.WriteString(t.W, b.String())
	return err
}

// Row writes one row.
func (t *Table) Row(r Row) error {
	t.rows = append(t.rows, r)
	var err error
	switch t.Format {
	case TSV:
		skew := "nan"
		if r.Calls > 0 {
			skew = fmt.Sprintf("%.2f", r.SkewUs)
		}
		line := fmt.Sprintf("%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.4f\t%.4f\t%s\t%s\t%d",
			r.Bytes, r.Count, r.Iters, r.AvgUs, r.MinUs, r.MaxUs, r.AlgBW, r.BusBW, r.CheckString(), skew, r.lateRank())
		_, err = io.WriteString(t.W, line+t.sentColumn("\t%.0f", r)+"\n")
	default:
		wrong := "N/A"
		if r.Checks > 0 {
			wrong = fmt.Sprint(r.Wrong)
		}
		skew, late := "N/A", "N/A"
		if r.Calls > 0 {
			skew, late = fmt.Sprintf("%.2f", r.SkewUs), fmt.Sprint(r.lateRank())
		}
		line := fmt.Sprintf(textCols, fmt.Sprint(r.Bytes), fmt.Sprint(r.Count), r.Type, r.RedOp, r.Algo,
			fmt.Sprintf("%.2f", r.AvgUs), fmt.Sprintf("%.2f", r.AlgBW), fmt.Sprintf("%.2f", r.BusBW), wrong,
			fmt.Sprintf("%.2f", r.MinUs), fmt.Sprintf("%.2f", r.MaxUs), skew, late)
		_, err = io.WriteString(t.W, strings.TrimSuffix(line, "\n")+t.sentColumn("  %12.0f", r)+"\n")
	}
	return err
}

// sentColumn is the row's bytes sent per rank in format, or nothing when the table does not
// show them (Config.ShowSent).
func (t *Table) sentColumn(format string, r Row) string {
	if !t.Meta.Config.ShowSent {
		return ""
	}
	return fmt.Sprintf(format, r.SentBytes)
}

// lateRank is the row's late rank, -1 when nothing was attributed.
func (r Row) lateRank() int {
	if r.Calls == 0 {
		return -1
	}
	return r.LateRank
}

// Trailer writes the lines after the rows: in text, nccl-tests' out-of-bounds count and average
// bus bandwidth; TSV has no trailer (the harness reads rows only).
func (t *Table) Trailer() error {
	if t.Format == TSV {
		return nil
	}
	wrong, avg := Totals(t.rows)
	verdict := "OK"
	if wrong != 0 {
		verdict = "FAILED"
	} else if t.Meta.Config.Check == 0 {
		verdict = "(not checked)"
	}
	_, err := fmt.Fprintf(t.W, "# Out of bounds values : %d %s\n# Avg bus bandwidth : %.4f\n#\n", wrong, verdict, avg)
	return err
}

// WriteJSON writes results as one indented JSON document {"results": [...]}.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Results []Result `json:"results"`
	}{results})
}
