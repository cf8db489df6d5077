package collective

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// A rank that gives up on a call is reported by every other rank as the first to give up, with
// its own error, however many ranks the abort passed through on the way.
func TestAbortNamesTheFirstRank(t *testing.T) {
	for _, p := range []int{2, 3, 5, 9} {
		for _, alg := range []string{"ring", "butterfly"} {
			j := newMemJob(t, p, Options{Algorithm: alg})
			quitter := p - 1
			errs := j.run(func(c *Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				if c.Rank() == quitter {
					cancel()
				}
				defer cancel()
				return c.AllReduce(ctx, F32(make([]float32, 7)), Sum)
			})
			for r, err := range errs {
				if err == nil {
					t.Fatalf("p=%d %s: rank %d succeeded", p, alg, r)
				}
				if r == quitter {
					continue
				}
				var pa *PeerAbortedError
				want := fmt.Sprintf("the first to give up was job rank %d: rank %d: allreduce #0 (%s): context canceled", quitter, quitter, alg)
				if !errors.As(err, &pa) || pa.First != quitter || !strings.Contains(err.Error(), want) {
					t.Errorf("p=%d %s: rank %d: %v\nwant a *PeerAbortedError containing %q", p, alg, r, err, want)
				}
			}
		}
	}
}

// logSink keeps the log lines of one rank; the watchdog writes them from its timer.
type logSink struct {
	sync.Mutex
	lines []string
}

func (l *logSink) Write(p []byte) (int, error) {
	l.Lock()
	l.lines = append(l.lines, string(p))
	l.Unlock()
	return len(p), nil
}

func (l *logSink) String() string {
	l.Lock()
	defer l.Unlock()
	return strings.Join(l.lines, "")
}

// A call that waits longer than StallAfter is reported by the ranks that wait, naming the
// peers they wait for; a call that does not is not reported.
func TestStallReportNamesTheLateRank(t *testing.T) {
	// A 5-value allreduce of in-process ranks must not be reported as stalled: the threshold
	// leaves a loaded host room to deschedule a rank for a while.
	const after = 500 * time.Millisecond
	for _, p := range []int{2, 3, 4, 7} {
		late := p - 1
		logs := make([]*logSink, p)
		j := &job{}
		for r, ep := range newMemEndpoints(t, p) {
			logs[r] = &logSink{}
			c, err := New(ep, Options{Algorithm: "ring", Watch: Watch{StallAfter: after,
				Logger: slog.New(slog.NewTextHandler(logs[r], nil))}})
			if err != nil {
				t.Fatal(err)
			}
			j.comms = append(j.comms, c)
		}
		j.mustRun(t, "on time", func(c *Comm) error {
			return c.AllReduce(context.Background(), F32(make([]float32, 5)), Sum)
		})
		for r, l := range logs {
			if s := l.String(); s != "" {
				t.Fatalf("p=%d: rank %d reported a call that did not stall: %s", p, r, s)
			}
		}
		j.mustRun(t, "late", func(c *Comm) error {
			if c.Rank() == late {
				time.Sleep(3 * after)
			}
			return c.AllReduce(context.Background(), F32(make([]float32, 5)), Sum)
		})
		named := false
		for r, l := range logs {
			s := l.String()
			if r == late {
				continue
			}
			if !strings.Contains(s, fmt.Sprintf("rank %d: allreduce #1 (ring) has waited", r)) {
				t.Errorf("p=%d: rank %d did not report its stalled call: %q", p, r, s)
			}
			named = named || strings.Contains(s, fmt.Sprintf("for rank %d", late))
		}
		if !named {
			t.Errorf("p=%d: no rank reported waiting for the late rank %d", p, late)
		}
	}
}

// traceEvent is a Chrome trace event as the test reads it back.
type traceEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args"`
}

// The timeline holds, per rank, every call with its algorithm and size, every message with its
// peer and bytes, and the program's own spans, in a file that parses as a trace-event array.
func TestTimelineRecordsCallsAndMessages(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5} {
		const n = 1001
		bufs := make([]*bytes.Buffer, p)
		j := &job{}
		for r, ep := range newMemEndpoints(t, p) {
			bufs[r] = &bytes.Buffer{}
			c, err := New(ep, Options{Algorithm: "ring", Watch: Watch{Timeline: NewTimeline(bufs[r], r)}})
			if err != nil {
				t.Fatal(err)
			}
			j.comms = append(j.comms, c)
		}
		j.mustRun(t, "allreduce", func(c *Comm) error {
			tl := c.opts.Watch.Timeline
			start := time.Now()
			for range 2 {
				if err := c.AllReduce(context.Background(), F32(make([]float32, n)), Sum); err != nil {
					return err
				}
			}
			tl.Span(TrackUser, "step", start, time.Now(), "round", 1)
			return tl.Close()
		})
		for r, b := range bufs {
			var evs []traceEvent
			if err := json.Unmarshal(b.Bytes(), &evs); err != nil {
				t.Fatalf("p=%d rank %d: the timeline does not parse: %v\n%s", p, r, err, b.String())
			}
			calls, sent, recvd, steps := 0, 0.0, 0.0, 0
			named := false
			for _, e := range evs {
				if e.Pid != r {
					t.Errorf("p=%d rank %d: event of pid %d", p, r, e.Pid)
				}
				switch {
				case e.Ph == "M" && e.Name == "process_name":
					named = e.Args["name"] == fmt.Sprintf("rank %d", r)
				case e.Ph == "X" && e.Name == "allreduce":
					if e.Tid != TrackCalls || e.Args["algorithm"] != "ring" || e.Args["bytes"] != float64(4*n) || e.Args["seq"] != float64(calls) || e.Dur < 0 {
						t.Errorf("p=%d rank %d: call event %+v", p, r, e)
					}
					calls++
				case e.Ph == "X" && (e.Name == "send" || e.Name == "recv"):
					peer, _ := e.Args["peer"].(float64)
					if int(peer) == r || peer < 0 || int(peer) >= p {
						t.Errorf("p=%d rank %d: message event with peer %v", p, r, e.Args["peer"])
					}
					if e.Name == "send" {
						sent += e.Args["bytes"].(float64)
					} else {
						recvd += e.Args["bytes"].(float64)
					}
				case e.Ph == "X" && e.Name == "step":
					steps++
					if e.Tid != TrackUser || e.Args["round"] != float64(1) {
						t.Errorf("p=%d rank %d: span %+v", p, r, e)
					}
				}
			}
			// A ring allreduce sends and receives 2(p-1)/p of the buffer per call (block
			// sizes differ by at most one element).
			want := 2 * 2 * float64(p-1) / float64(p) * 4 * n
			if !named || calls != 2 || steps != 1 || abs(sent-want) > 16*float64(p) || abs(recvd-want) > 16*float64(p) {
				t.Errorf("p=%d rank %d: named %v, %d calls, %d steps, sent %v received %v bytes (want about %v)",
					p, r, named, calls, steps, sent, recvd, want)
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func newMemEndpoints(t *testing.T, p int) []transport.Endpoint {
	eps := transport.NewMemJob(p)
	t.Cleanup(func() { transport.CloseAll(eps) })
	return eps
}
