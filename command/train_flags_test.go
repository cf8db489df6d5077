package command

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/trainer"
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
		{[]string{"--sync", "bsp"}, "known: asgd, dcasgd, esync, local, ssgd, ssp, sync-switch, wbsp, wbsp-opt"},
		{[]string{"--sync", "dcasgd", "--dcasgd-lambda", "0"}, "--dcasgd-lambda: λ 0 is asgd: use --sync asgd"},
		{[]string{"--sync", "ssp", "--ps-ranks", "1,x"}, "--ps-ranks"},
		{[]string{"--sync", "wbsp", "--collective", "ps", "--ps-ranks", "9"}, "--ps-ranks: rank 9 out of range"},
		{[]string{"--sync", "wbsp", "--ps-ranks", "1"}, "--ps-ranks place the parameter server of --collective ps"},
		{[]string{"--sync", "wbsp-opt", "--collective", "butterfly", "--wbsp-apply", "immediate"}, "--wbsp-apply immediate needs --collective ps"},
		{[]string{"--sync", "asgd", "--collective", "ring"}, "--collective ring: --sync asgd runs only over ps"},
		{[]string{"--sync", "ssp", "--collective", "auto"}, "--collective auto: --sync ssp runs only over ps"},
		{[]string{"--sync", "ssp", "--staleness", "-2"}, "--staleness"},
		// an option of a strategy that is not selected is refused, not ignored
		{[]string{"--sync", "ssgd", "--esync-epsilon", "0.5s"}, "--esync-epsilon is an option of --sync esync; --sync ssgd does not take it"},
		{[]string{"--sync", "esync", "--ps-ranks", "1"}, "--ps-ranks is an option of --sync asgd, dcasgd, ssp, sync-switch, wbsp, wbsp-opt; --sync esync does not take it"},
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

// TestSlowdownBaseWithoutSlowdown checks that a base applies to every rank whether it is a
// duration or tfast, with or without --slowdown: config.json records it.
func TestSlowdownBaseWithoutSlowdown(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"tfast", []string{"--slowdown-base", "tfast", "--hetero-tfast", "2ms"}},
		{"duration", []string{"--slowdown-base", "2ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg struct {
				Base time.Duration `json:"slowdown_base"`
			}
			b := trainConfigJSON(t, data, filepath.Join(dir, tc.name), append([]string{"--sync", "ssgd"}, tc.args...))
			if err := json.Unmarshal(b, &cfg); err != nil || cfg.Base != 2*time.Millisecond {
				t.Errorf("config.json slowdown_base %v (%v), want 2ms", cfg.Base, err)
			}
		})
	}
}

// TestStrategyOptionsRecorded checks that a strategy's flags reach its options and that
// config.json records them under "options" (another strategy's flags are refused:
// TestESyncSyncSwitchFlagErrors).
func TestStrategyOptionsRecorded(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	for _, tc := range []struct {
		sync string
		args []string
		want string
	}{
		{"ssp", []string{"--staleness", "3", "--ps-ranks", "1"}, `{"ps_ranks":[1],"staleness":3,"ssp_pull":"every"}`},
		{"esync", []string{"--local-momentum", "0", "--esync-epsilon", "2x"},
			`{"local_lr":0.05,"local_momentum":0,"global_lr":1,"epsilon_factor":2,"queries":"blocking"}`},
		{"ssgd", nil, `{}`},
	} {
		t.Run(tc.sync, func(t *testing.T) {
			var cfg struct {
				Options json.RawMessage `json:"options"`
			}
			b := trainConfigJSON(t, data, filepath.Join(dir, tc.sync), append([]string{"--sync", tc.sync}, tc.args...))
			var got bytes.Buffer
			if err := json.Unmarshal(b, &cfg); err != nil || json.Compact(&got, cfg.Options) != nil || got.String() != tc.want {
				t.Errorf("config.json options %s (%v), want %s", got.String(), err, tc.want)
			}
		})
	}
}

// trainConfigJSON trains 2 rounds on 2 in-process ranks with args and returns config.json.
func trainConfigJSON(t *testing.T, data, out string, args []string) []byte {
	t.Helper()
	args = append([]string{"train", "--np", "2", "--transport", "mem", "--data", data, "--max-rounds", "2",
		"--batch", "16", "--threads", "1", "--out", out}, args...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTrainRecordsWhatRan checks that config.json records the collective a strategy runs over
// (its default when none is given: the library's, auto, or ps for a strategy that runs only
// over it) and summary.json what the rounds actually ran over.
func TestTrainRecordsWhatRan(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	for _, tc := range []struct {
		name       string
		args       []string
		asked, ran string
	}{
		{"ssgd-default", []string{"--sync", "ssgd"}, trainer.DefaultCollective, "recursive-doubling"},
		{"ssgd-ring", []string{"--sync", "ssgd", "--collective", "ring"}, "ring", "ring"},
		// rank 1's delayed endpoint runs under a communicator the trainer builds (rankOptions)
		{"ssgd-ring-network-straggler", []string{"--sync", "ssgd", "--collective", "ring", "--stragglers", "ranks=1;delay=1ms;at=0s;for=1s"}, "ring", "ring"},
		{"asgd-default", []string{"--sync", "asgd"}, "ps", trainer.ParameterServer},
		{"wbsp-butterfly", []string{"--sync", "wbsp", "--collective", "butterfly"}, "butterfly", "butterfly"},
		{"wbsp-ps", []string{"--sync", "wbsp", "--collective", "ps"}, "ps", trainer.ParameterServer},
		{"wbsp-opt-auto", []string{"--sync", "wbsp-opt", "--collective", "auto"}, "auto", "recursive-doubling"},
		{"local", []string{"--sync", "local"}, trainer.DefaultCollective, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name)
			var cfg struct {
				Collective string `json:"collective"`
			}
			if err := json.Unmarshal(trainConfigJSON(t, data, out, tc.args), &cfg); err != nil || cfg.Collective != tc.asked {
				t.Errorf("config.json collective %q (%v), want %q", cfg.Collective, err, tc.asked)
			}
			b, err := os.ReadFile(filepath.Join(out, "summary.json"))
			if err != nil {
				t.Fatal(err)
			}
			var sum struct {
				Collective string `json:"collective"`
				DataPath   string `json:"data_path"`
			}
			if err := json.Unmarshal(b, &sum); err != nil || !strings.HasPrefix(sum.Collective, tc.ran) || sum.DataPath != "mem" {
				t.Errorf("summary.json collective %q on %q (%v), want %q on mem", sum.Collective, sum.DataPath, err, tc.ran)
			}
		})
	}
}

// TestRanksWithDifferentConfigsFail launches 3 real rank processes of train whose --lr differs
// (0.1 on rank 0, 0.3 on the others): the job fails at the start, every rank naming the flag,
// both values and the ranks, instead of training three different models and exiting 0.
func TestRanksWithDifferentConfigsFail(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	rank := `lr=0.1; [ "$HETSYNC_RANK" = 0 ] || lr=0.3; exec "$0" train --data "$1" --max-rounds 2 --batch 16 --threads 1 --lr "$lr" --out "$2"`
	code, out, stderr := runBinary(t, "launch", "-np", "3", "--", "sh", "-c", rank, hetsyncBinary(t), data, filepath.Join(dir, "run"))
	const want = "config differs between ranks: --lr is 0.1 on rank 0 but 0.3 on ranks 1,2"
	if code == 0 || !strings.Contains(out+stderr, want) {
		t.Fatalf("exit %d; want a failure saying %q\nstdout:\n%s\nstderr:\n%s", code, want, out, stderr)
	}
}
