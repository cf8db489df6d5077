package launcher

import (
	"bytes"
	"strings"
	"testing"
)

func TestPrefixWriter(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		writes []string
		want   string
	}{
		{"one line", "[0] ", []string{"hello\n"}, "[0] hello\n"},
		{"split line", "[1] ", []string{"hel", "lo", "\n"}, "[1] hello\n"},
		{"two lines in one write", "[2] ", []string{"a\nb\n"}, "[2] a\n[2] b\n"},
		{"unterminated tail is flushed", "[3] ", []string{"a\nb"}, "[3] a\n[3] b\n"},
		{"empty lines", "[4] ", []string{"\n\n"}, "[4] \n[4] \n"},
		{"no prefix", "", []string{"x", "y\nz"}, "xy\nz\n"},
		{"nothing", "[5] ", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := newPrefixWriter(tc.prefix, &lockedWriter{w: &out})
			for _, s := range tc.writes {
				n, err := w.Write([]byte(s))
				if err != nil || n != len(s) {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			w.Flush()
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestPrefixWriterLongLine(t *testing.T) {
	var out bytes.Buffer
	w := newPrefixWriter("[7] ", &lockedWriter{w: &out})
	long := strings.Repeat("x", maxLine+10)
	// An unterminated line is held only up to maxLine bytes, then written in pieces.
	for _, s := range []string{long[:10], long[10:], "\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "[7] "+long[:maxLine] || lines[1] != "[7] "+long[maxLine:] {
		t.Errorf("long line split into %d pieces with lengths %v", len(lines), lens(lines))
	}
}

func lens(ss []string) []int {
	n := make([]int, len(ss))
	for i, s := range ss {
		n[i] = len(s)
	}
	return n
}
