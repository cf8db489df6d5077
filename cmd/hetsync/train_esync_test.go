package main

import (
	"strings"
	"testing"
)

// TestESyncSyncSwitchFlagErrors checks that bad esync, sync-switch and straggler flags are
// usage errors that name the flag.
func TestESyncSyncSwitchFlagErrors(t *testing.T) {
	base := []string{"train", "--np", "4", "--transport", "mem"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--sync", "esync", "--esync-epsilon", "soon"}, "--esync-epsilon"},
		{[]string{"--sync", "esync", "--local-lr", "-1"}, "--local-lr"},
		{[]string{"--sync", "esync", "--global-lr", "-0.5"}, "--global-lr"},
		{[]string{"--sync", "esync", "--esync-queries", "sometimes"}, "--esync-queries"},
		{[]string{"--slowdown", "1,1,2,4", "--slowdown-base", "fast"}, "--slowdown-base"},
		{[]string{"--slowdown", "1,1,2,4", "--slowdown-base", "-3ms"}, "--slowdown-base"},
		{[]string{"--sync", "sync-switch", "--switch-at", "2"}, "--switch-at"},
		{[]string{"--sync", "sync-switch", "--straggler-policy", "lazy"}, "--straggler-policy"},
		{[]string{"--sync", "sync-switch", "--straggler-threshold", "1"}, "--straggler-threshold"},
		{[]string{"--stragglers", "ranks=1;delay=30ms"}, "--stragglers"},
		{[]string{"--stragglers", "ranks=7;delay=30ms;at=1s;for=1s"}, "--stragglers: rank 7 out of range for 4 ranks"},
		{[]string{"--stragglers", "preset:s9"}, "unknown preset"},
		{[]string{"--sync", "ssgd", "--stragglers", "ranks=1;delay=3ms;at=1s;for=1s;mode=compute"}, "mode=compute"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, append(base, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
