package procstat

import "testing"

func TestParse(t *testing.T) {
	rest := " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21"
	for _, tc := range []struct {
		line  string
		state byte
		start uint64
		bad   bool
	}{
		{line: "17 (hetsync) S" + rest, state: 'S', start: 4242},
		{line: "17 (a (b) c) T" + rest, state: 'T', start: 4242}, // comm with spaces and parentheses
		{line: "17 (x) Z" + rest, state: 'Z', start: 4242},
		{line: "17 hetsync S" + rest, bad: true},
		{line: "17 (x) S 1 2", bad: true},
		{line: "17 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 nope", bad: true},
	} {
		st, start, err := Parse([]byte(tc.line))
		if tc.bad {
			if err == nil {
				t.Errorf("%q: parsed as %c %d, want an error", tc.line, st, start)
			}
			continue
		}
		if err != nil || st != tc.state || start != tc.start {
			t.Errorf("%q: %c %d %v, want %c %d", tc.line, st, start, err, tc.state, tc.start)
		}
	}
}
