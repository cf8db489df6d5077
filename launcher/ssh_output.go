package launcher

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// timestampWriter starts every line with the time it was written. It sits under a
// lockedWriter, which writes each line (prefix, then text) under one lock, so tracking the
// start of a line across writes is enough.
type timestampWriter struct {
	w      io.Writer
	midway bool // the last write did not end a line
	buf    []byte
}

func (t *timestampWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !t.midway {
		t.buf = time.Now().AppendFormat(t.buf[:0], "2006-01-02T15:04:05.000Z07:00 ")
		if _, err := t.w.Write(t.buf); err != nil {
			return 0, err
		}
	}
	t.midway = b[len(b)-1] != '\n'
	return t.w.Write(b)
}

// rankLogs are the per-rank files of Job.OutputDir.
type rankLogs struct {
	files   []*os.File
	writers []*prefixWriter
}

// openRankLogs creates dir and dir/rank.N.log for every rank; an empty dir opens nothing.
func openRankLogs(dir string, np int) (*rankLogs, error) {
	l := &rankLogs{}
	if dir == "" {
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--output-dir: %w", err)
	}
	for r := 0; r < np; r++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("rank.%d.log", r)))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("--output-dir: %w", err)
		}
		l.files = append(l.files, f)
		// One prefixWriter (no prefix) per file keeps stdout and stderr lines whole.
		l.writers = append(l.writers, newPrefixWriter("", &lockedWriter{w: f}))
	}
	return l, nil
}

// writer is rank r's file writer, or nil without an output directory.
func (l *rankLogs) writer(r int) *prefixWriter {
	if r < len(l.writers) {
		return l.writers[r]
	}
	return nil
}

func (l *rankLogs) close() {
	for i, f := range l.files {
		l.writers[i].Flush()
		_ = f.Close()
	}
}
