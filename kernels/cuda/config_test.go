package cuda

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDevice(t *testing.T) {
	cases := []struct {
		name    string
		ordinal int
		err     string
	}{
		{"cuda", 0, ""},
		{"cuda:0", 0, ""},
		{"cuda:3", 3, ""},
		{"cuda:1023", 1023, ""},
		{"cuda:1024", 0, "not a device number"},
		{"cuda:-1", 0, "not a device number"},
		{"cuda:01", 0, "not a device number"},
		{"cuda:+1", 0, "not a device number"},
		{"cuda:", 0, "not a device number"},
		{"cuda:x", 0, "not a device number"},
		{"cuda0", 0, "want \"cuda\""},
		{"gpu:0", 0, "want \"cuda\""},
		{"cpu", 0, "want \"cuda\""},
		{"", 0, "want \"cuda\""},
	}
	for _, c := range cases {
		got, err := ParseDevice(c.name)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseDevice(%q): %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseDevice(%q) = %d, %v; want an error containing %q", c.name, got, err, c.err)
		case c.err == "" && got != c.ordinal:
			t.Errorf("ParseDevice(%q) = %d, want %d", c.name, got, c.ordinal)
		}
		if c.err != "" && err != nil && !strings.Contains(err.Error(), c.name) {
			t.Errorf("ParseDevice(%q): error %q does not name the device", c.name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg Config
		err string
	}{
		{Config{Device: "cuda:1"}, ""},
		{Config{Device: "cuda", ConvWorkspaceBytes: 1 << 20}, ""},
		{Config{Device: "cuda:0", ConvWorkspaceBytes: -1}, "workspace"},
		{Config{Device: "tpu:0"}, "want \"cuda\""},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%+v.Validate() = %v, want error containing %q", c.cfg, err, c.err)
		}
	}
	if got := (Config{}).convWorkspaceBytes(); got != DefaultConvWorkspaceBytes {
		t.Errorf("default workspace %d, want %d", got, DefaultConvWorkspaceBytes)
	}
}

// Open validates its configuration before anything else, with or without CUDA built in.
func TestOpenRejectsBadConfig(t *testing.T) {
	if _, err := Open(Config{Device: "cuda:x"}); err == nil || errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open with a bad device name: %v, want a validation error", err)
	}
}
