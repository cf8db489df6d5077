package collective

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// Timeline writes what one rank does as Chrome trace events, in the Trace Event Format's JSON
// array form: Perfetto's UI (ui.perfetto.dev), chrome://tracing and the Performance panel of
// Chrome's DevTools open the file. The rank is a process ("rank N"), with a thread per
// kind of activity: its collective calls (name, algorithm, bytes, sequence number, error), the
// messages it sends and the receives it waits on (peer, bytes; a receive's span is the time
// the rank waited for the peer's data, transfer included), and the spans its program adds
// (Span: a trainer's steps and rounds). Times are wall-clock microseconds, so the files of
// several ranks of one host line up when their arrays are concatenated into one (jq -s add).
//
// Events are written as they end, through a buffer that Flush and Close empty; the array is
// closed by Close, and a file cut short by a crash still opens (the format allows a missing
// closing bracket). A Comm with no Timeline pays one nil check per call and per message.
type Timeline struct {
	rank int

	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer
	n      int
	err    error
	buf    []byte
}

// Timeline threads of a rank.
const (
	TrackCalls = 1 // collective calls
	TrackSend  = 2 // messages sent
	TrackRecv  = 3 // receives, waits included
	TrackUser  = 4 // the program's own spans (Span)
)

// NewTimeline writes rank's events to w; Close closes w when it is an io.Closer.
func NewTimeline(w io.Writer, rank int) *Timeline {
	t := &Timeline{rank: rank, w: bufio.NewWriterSize(w, 64<<10)}
	t.closer, _ = w.(io.Closer)
	t.w.WriteString("[\n")
	t.meta("process_name", 0, "rank "+strconv.Itoa(rank))
	t.meta("process_sort_index", 0, rank)
	for tid, name := range []string{TrackCalls: "collectives", TrackSend: "send", TrackRecv: "recv (wait)", TrackUser: "program"} {
		if name != "" {
			t.meta("thread_name", tid, name)
		}
	}
	return t
}

// CreateTimeline creates the file path for rank's events.
func CreateTimeline(path string, rank int) (*Timeline, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("rank %d: timeline: %w", rank, err)
	}
	return NewTimeline(f, rank), nil
}

// TimelinePath is the file of rank's events for a timeline named path: trace.json becomes
// trace.rank3.json.
func TimelinePath(path string, rank int) string {
	ext := ""
	for i := len(path) - 1; i >= 0 && path[i] != '/'; i-- {
		if path[i] == '.' {
			path, ext = path[:i], path[i:]
			break
		}
	}
	return fmt.Sprintf("%s.rank%d%s", path, rank, ext)
}

func (t *Timeline) meta(name string, tid int, value any) {
	arg := "name"
	if name == "process_sort_index" {
		arg = "sort_index"
	}
	v, _ := jsonValue(value)
	t.emit(fmt.Sprintf(`{"ph":"M","name":%q,"pid":%d,"tid":%d,"args":{%q:%s}}`, name, t.rank, tid, arg, v))
}

// emit writes one event; t.mu is held or t is not shared yet.
func (t *Timeline) emit(ev string) {
	if t.err != nil {
		return
	}
	if t.n > 0 {
		t.w.WriteString(",\n")
	}
	t.n++
	_, t.err = t.w.WriteString(ev)
}

// Span records a span of the program's own (a trainer's local step, a round) on track, from
// start to end, with args as key, value pairs.
func (t *Timeline) Span(track int, name string, start, end time.Time, args ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.span(track, name, start, end, args)
}

// span appends a complete ("X") event; t.mu is held.
func (t *Timeline) span(track int, name string, start, end time.Time, args []any) {
	b := t.buf[:0]
	b = append(b, `{"ph":"X","name":`...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(t.rank), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(track), 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendFloat(b, float64(start.UnixNano())/1e3, 'f', 3, 64)
	b = append(b, `,"dur":`...)
	b = strconv.AppendFloat(b, float64(max(0, end.Sub(start).Nanoseconds()))/1e3, 'f', 3, 64)
	b = append(b, `,"args":{`...)
	for i := 0; i+1 < len(args); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, fmt.Sprint(args[i]))
		b = append(b, ':')
		v, _ := jsonValue(args[i+1])
		b = append(b, v...)
	}
	b = append(b, "}}"...)
	t.buf = b
	t.emit(string(b))
}

// jsonValue is v as a JSON number or string.
func jsonValue(v any) (string, bool) {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case error:
		return strconv.Quote(x.Error()), true
	}
	return strconv.Quote(fmt.Sprint(v)), false
}

// call records collective call seq of c.
func (t *Timeline) call(c *Comm, seq uint64, kind collKind, bytes int, start, end time.Time, err error) {
	args := []any{"seq", seq, "algorithm", c.algName, "bytes", bytes, "comm", c.who}
	if err != nil {
		args = append(args, "error", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.span(TrackCalls, kind.String(), start, end, args)
}

// message records a send to or a receive from peer (a rank of c) of bytes.
func (t *Timeline) message(c *Comm, recv bool, peer, bytes int, start, end time.Time) {
	track, name := TrackSend, "send"
	if recv {
		track, name = TrackRecv, "recv"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.span(track, name, start, end, []any{"peer", c.jobRank(peer), "bytes", bytes})
}

// Flush writes the buffered events out.
func (t *Timeline) Flush() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.w.Flush()
	}
	return t.err
}

// Close ends the array, flushes it and closes the writer when it is a Closer.
func (t *Timeline) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		_, t.err = t.w.WriteString("\n]\n")
	}
	if t.err == nil {
		t.err = t.w.Flush()
	}
	if t.closer != nil {
		if err := t.closer.Close(); t.err == nil {
			t.err = err
		}
		t.closer = nil
	}
	if t.err != nil {
		return fmt.Errorf("rank %d: timeline: %w", t.rank, t.err)
	}
	t.err = os.ErrClosed
	return nil
}

// traceNow is the start of a message when c has a timeline or stamps its messages for
// attribution, else the zero time.
func (c *Comm) traceNow() time.Time {
	if c.opts.Watch.Timeline == nil && !c.attr.recording {
		return time.Time{}
	}
	return time.Now()
}

// traceMessage records a message that started at start (traceNow) in the timeline and in the
// call's attribution stamps.
func (c *Comm) traceMessage(recv bool, peer, bytes int, start time.Time) {
	tl := c.opts.Watch.Timeline
	if tl == nil && !c.attr.recording {
		return
	}
	end := time.Now()
	if c.attr.recording {
		c.attr.message(recv, start, end)
	}
	if tl != nil {
		tl.message(c, recv, peer, bytes, start, end)
	}
}
