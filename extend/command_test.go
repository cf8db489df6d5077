package extend

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetsync/hetsync/command"
	"github.com/hetsync/hetsync/metrics"
)

// TestCommandLineFromOutside builds `hetsync` with the strategy and the algorithm this package
// defines (command.Main with Options) and runs `hetsync train` with them, as a program that
// ships its own hetsync binary does: --sync local-sgd and its --sync-period are flags of train
// (its help lists them), --collective reduce-broadcast runs the outside algorithm, and the run
// directory records all three.
func TestCommandLineFromOutside(t *testing.T) {
	opts := command.Options{Strategies: strategies(t), Algorithms: registry(t)}
	var help bytes.Buffer
	if code := command.Main([]string{"hetsync", "train", "--help"}, &help, &help, opts); code != 0 {
		t.Fatalf("train --help: exit %d\n%s", code, help.String())
	}
	if !strings.Contains(help.String(), "--sync-period") || !strings.Contains(help.String(), "local-sgd") {
		t.Fatalf("train --help does not list local-sgd and --sync-period:\n%s", help.String())
	}
	out := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	code := command.Main([]string{"hetsync", "train", "--transport", "mem", "--np", "3",
		"--sync", "local-sgd", "--sync-period", "3", "--collective", algName,
		"--data", stripes, "--threads", "1", "--batch", "16", "--momentum", "0.9", "--seed", "7",
		"--max-rounds", "6", "--eval-every", "3", "--out", out}, &stdout, &stderr, opts)
	if code != 0 {
		t.Fatalf("hetsync train with local-sgd over %s: exit %d\n%s%s", algName, code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, metrics.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Strategy   string         `json:"strategy"`
		Collective string         `json:"collective"`
		Options    map[string]any `json:"options"`
	}
	if err := json.Unmarshal(b, &config); err != nil {
		t.Fatal(err)
	}
	if config.Strategy != "local-sgd" || config.Collective != algName || config.Options["sync_period"] != 3.0 {
		t.Fatalf("config.json records sync %q over %q with options %v; want local-sgd over %s with sync_period 3",
			config.Strategy, config.Collective, config.Options, algName)
	}
	sum, err := metrics.ReadSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Collective != algName {
		t.Errorf("summary.json: the rounds ran over %q, want %s", sum.Collective, algName)
	}
	// The built-in command line knows neither.
	var none bytes.Buffer
	if code := command.Main([]string{"hetsync", "train", "--transport", "mem", "--np", "3", "--sync", "local-sgd", "--data", stripes},
		&none, &none, command.Options{}); code != 2 || !strings.Contains(none.String(), "local-sgd") {
		t.Errorf("the built-in hetsync train took --sync local-sgd: exit %d\n%s", code, none.String())
	}
}
