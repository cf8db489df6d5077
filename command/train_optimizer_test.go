package command

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainOptimizerFlags runs train under each optimizer: config.json records the
// optimizer and the settings it used (Adam's defaults included), and a default run records
// none of them, as before the optimizers were plug-ins.
func TestTrainOptimizerFlags(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	for _, tc := range []struct {
		name string
		args []string
		want string // config.json's optimizer settings, as JSON
	}{
		{"default", nil, `{"momentum":0.9,"weight_decay":0}`},
		{"sgd-nesterov", []string{"--optimizer", "sgd", "--nesterov"}, `{"optimizer":"sgd","momentum":0.9,"nesterov":true,"weight_decay":0}`},
		{"adam", []string{"--optimizer", "adam"}, `{"optimizer":"adam","momentum":0,"weight_decay":0,"beta1":0.9,"beta2":0.999,"eps":1e-8}`},
		{"adamw", []string{"--optimizer", "adamw", "--sync", "esync", "--beta1", "0", "--weight-decay", "0.01", "--lr", "0.001"},
			`{"optimizer":"adamw","momentum":0,"weight_decay":0.01,"beta1":0,"beta2":0.999,"eps":1e-8}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := trainConfigJSON(t, data, filepath.Join(dir, tc.name), tc.args)
			var all map[string]json.RawMessage
			if err := json.Unmarshal(b, &all); err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			got = map[string]any{}
			for _, k := range []string{"optimizer", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2", "eps"} {
				if v, ok := all[k]; ok {
					var x any
					if err := json.Unmarshal(v, &x); err != nil {
						t.Fatal(err)
					}
					got[k] = x
				}
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Fatalf("config.json's optimizer settings %s, want %s", gb, wb)
			}
		})
	}
}

// TestTrainOptimizerFlagErrors: a bad optimizer flag is a usage error naming the flag, and
// the strategy where it is the strategy that cannot take the optimizer.
func TestTrainOptimizerFlagErrors(t *testing.T) {
	base := []string{"train", "--np", "4", "--transport", "mem"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--optimizer", "lion"}, `--optimizer "lion": unknown (known: adam, adamw, sgd)`},
		{[]string{"--optimizer", "adam", "--momentum", "0.9"}, "--momentum is a setting of --optimizer sgd; --optimizer adam does not take it"},
		{[]string{"--beta2", "0.99"}, "--beta2 is a setting of --optimizer adam, adamw; --optimizer sgd does not take it"},
		{[]string{"--optimizer", "adamw", "--eps", "-1"}, "--eps must be a positive number"},
		{[]string{"--nesterov", "--momentum", "0"}, "--nesterov needs --momentum > 0"},
		{[]string{"--sync", "asgd", "--optimizer", "adam"}, "--optimizer adam: --sync asgd updates the model with its parameter server's rule"},
		{[]string{"--sync", "sync-switch", "--optimizer", "adamw"}, "--sync sync-switch carries SGD's momentum"},
		{[]string{"--sync", "esync", "--optimizer", "adam", "--local-momentum", "0.5"}, "--local-momentum"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, append(base, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
