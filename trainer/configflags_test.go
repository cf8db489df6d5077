package trainer

import (
	"strings"
	"testing"
	"time"
)

// TestConfigFromFlags: flags in the command's words make the Config `hetsync train` makes,
// the strategy's options included, and what is wrong is named by its flag.
func TestConfigFromFlags(t *testing.T) {
	reg := Builtin()
	cfg, err := ConfigFromFlags(reg, [][2]string{{"sync", "esync"}, {"--lr", "0.05"}, {"batch", "32"},
		{"slowdown", "1,1,2,4"}, {"slowdown-base", "8ms"}, {"max-time", "30s"}, {"eval-every", "0.2s"},
		{"local-lr", "0.02"}, {"seed", "7"}})
	if err != nil {
		t.Fatal(err)
	}
	es, ok := cfg.Options.(*ESyncConfig)
	if !ok || es.LocalLR != 0.02 {
		t.Fatalf("options = %#v, want ESync's with --local-lr 0.02", cfg.Options)
	}
	if cfg.Strategy != "esync" || cfg.LR != 0.05 || cfg.Batch != 32 || len(cfg.Slowdown) != 4 || cfg.Slowdown[3] != 4 ||
		cfg.SlowdownBase != 8*time.Millisecond || cfg.MaxTime != 30*time.Second || cfg.Seed != 7 || cfg.Eval.Interval != 200*time.Millisecond {
		t.Fatalf("config = %+v", cfg)
	}
	if err := reg.Validate(&cfg, 4); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	def, err := ConfigFromFlags(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultConfig(); def.Strategy != want.Strategy || def.Batch != want.Batch || def.LR != want.LR {
		t.Fatalf("no flags: %+v, want train's defaults %+v", def, want)
	}
	for _, tc := range []struct {
		flags [][2]string
		want  string
	}{
		{[][2]string{{"lr", "fast"}}, `--lr "fast"`},
		{[][2]string{{"batch", "0"}, {"lr", "0.1"}}, ""}, // given as 0: kept for Validate to refuse
		{[][2]string{{"bogus", "1"}}, "--bogus is neither a training setting nor an option of --sync ssgd"},
		{[][2]string{{"sync", "ssgd"}, {"local-lr", "0.1"}}, "--local-lr is an option of --sync esync"},
		{[][2]string{{"sync", "nope"}}, "nope"},
		{[][2]string{{"slowdown", "1,x"}}, "--slowdown"},
		{[][2]string{{"stragglers", "ranks=1"}}, "--stragglers"},
	} {
		cfg, err := ConfigFromFlags(reg, tc.flags)
		if tc.want == "" {
			if err != nil || cfg.Batch != 0 {
				t.Errorf("%v: %v, batch %d: want batch 0 kept", tc.flags, err, cfg.Batch)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one with %q", tc.flags, err, tc.want)
		}
	}
}
