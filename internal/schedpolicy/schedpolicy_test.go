package schedpolicy

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Policy
		wantErr string
	}{
		{"batch", Batch, ""},
		{" inherit ", Inherit, ""},
		{"", "", `--sched "": unknown scheduling policy (known: batch, inherit)`},
		{"rr", "", `--sched "rr": unknown`},
		{"BATCH", "", `--sched "BATCH": unknown`},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in, "--sched")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q): %v, want an error with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
