package command

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainCompress: train --compress runs esync's (overlapped too), ssgd's and local SGD's
// rounds compressed, config.json records it, and a compression a strategy or collective
// cannot take is refused by flag.
func TestTrainCompress(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	for i, args := range [][]string{
		{"--sync", "esync", "--collective", "ring", "--compress", "int8"},
		{"--sync", "ssgd", "--compress", "bf16"},
		{"--sync", "ssgd", "--compress", "int8"}, // over auto, which runs int8 calls as the ring
		{"--sync", "esync", "--outer", "nesterov", "--esync-overlap", "--compress", "int8"},
		{"--sync", "wbsp-opt", "--wbsp-period", "2", "--compress", "int8"},
	} {
		var cfg struct {
			Compress string `json:"compress"`
		}
		b := trainConfigJSON(t, data, filepath.Join(dir, "run", string(rune('a'+i))), args)
		if err := json.Unmarshal(b, &cfg); err != nil || cfg.Compress != args[len(args)-1] {
			t.Errorf("%v: config.json compress %q (%v)", args, cfg.Compress, err)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"--sync asgd --compress int8", "--compress int8: --sync asgd sends no compressed rounds"},
		{"--sync esync --compress int8 --collective butterfly", "int8 keeps the replicas identical only over auto, ring, ps, not --collective butterfly"},
		{"--sync esync --compress auto --collective ring", "int8 keeps the replicas identical only over auto, hier-ring, hier-ps, not --collective ring"},
		{"--sync esync --compress int4", `--compress: compression "int4": unknown`},
		{"--sync wbsp-opt --collective ps --compress int8", "--sync wbsp-opt over --collective ps sends no compressed rounds"},
	} {
		args := append([]string{"train", "--np", "2", "--transport", "mem", "--data", data, "--max-rounds", "1", "--out", filepath.Join(dir, "bad")},
			strings.Fields(tc.args)...)
		if code, _, stderr := runCLI(t, args...); code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("train %s: exit %d, stderr %q; want an error containing %q", tc.args, code, stderr, tc.want)
		}
	}
}
