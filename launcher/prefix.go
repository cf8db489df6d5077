package launcher

import (
	"bytes"
	"io"
	"sync"
)

// maxLine bounds how much of an unterminated line a prefixWriter holds; a longer line is
// written out in pieces of this size, each with the prefix.
const maxLine = 1 << 20

// lockedWriter serialises whole-line writes from several prefixWriters to one destination, so
// lines of different ranks never interleave inside a line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(prefix, line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Output errors (a closed terminal) must not stop the job: the rank's own exit decides.
	if len(prefix) > 0 {
		_, _ = l.w.Write(prefix)
	}
	_, _ = l.w.Write(line)
}

// prefixWriter is one rank's stdout or stderr: it buffers until a newline and writes every
// complete line, prefixed, to a shared lockedWriter.
type prefixWriter struct {
	mu     sync.Mutex
	prefix []byte
	out    *lockedWriter
	buf    []byte
}

func newPrefixWriter(prefix string, out *lockedWriter) *prefixWriter {
	return &prefixWriter{prefix: []byte(prefix), out: out}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.buf = append(p.buf, b...)
			for len(p.buf) >= maxLine {
				p.out.write(p.prefix, append(p.buf[:maxLine:maxLine], '\n'))
				p.buf = append(p.buf[:0], p.buf[maxLine:]...)
			}
			break
		}
		if len(p.buf) == 0 {
			p.out.write(p.prefix, b[:i+1])
		} else {
			p.buf = append(p.buf, b[:i+1]...)
			p.out.write(p.prefix, p.buf)
			p.buf = p.buf[:0]
		}
		b = b[i+1:]
	}
	return n, nil
}

// Flush writes a pending unterminated line, ending it with a newline.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.out.write(p.prefix, append(p.buf, '\n'))
		p.buf = p.buf[:0]
	}
}
