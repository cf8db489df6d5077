package trainer

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	c := Config{}
	c.Defaults()
	return c
}

func TestDefaults(t *testing.T) {
	c := validConfig()
	if c.Strategy != "ssgd" || c.Batch != 64 || c.LR != 0.05 || c.Epochs != 3 || c.Eval.Rounds != 20 {
		t.Fatalf("unexpected defaults %+v", c)
	}
	if err := c.Validate(4); err != nil {
		t.Fatal(err)
	}
	s := Config{GradReduction: "sum", Batch: 32, MaxTime: time.Minute}
	s.Defaults()
	if s.LR != 0.05/32 || s.Epochs != 0 {
		t.Fatalf("sum reduction: lr %v epochs %v, want %v and 0 (max-time bounds the run)", s.LR, s.Epochs, 0.05/32)
	}
}

// A batch or learning rate given as zero on a command line is kept for Validate to refuse,
// naming the flag; left unset it takes the default, as Defaults gives it.
func TestDefaultsUnset(t *testing.T) {
	given := func(flags ...string) func(string) bool {
		return func(f string) bool { return slices.Contains(flags, f) }
	}
	c := Config{MaxRounds: 2}
	c.DefaultsUnset(given("batch", "lr"))
	if c.Batch != 0 || c.LR != 0 || c.Strategy != "ssgd" || c.GradReduction != "mean" {
		t.Fatalf("given zeros: %+v, want batch and lr kept at 0, the rest defaulted", c)
	}
	if err := InFlags(Builtin().Validate(&c, 2)); err == nil || !strings.Contains(err.Error(), "--batch must be ≥ 1, got 0") {
		t.Errorf("a zero --batch: %v", err)
	}
	u := Config{MaxRounds: 2}
	u.DefaultsUnset(given("momentum"))
	if d := DefaultConfig(); u.Batch != d.Batch || u.LR != d.LR {
		t.Errorf("unset: batch %d lr %v, want the defaults %d and %v", u.Batch, u.LR, d.Batch, d.LR)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		size int
		want string
	}{
		{"unknown strategy", func(c *Config) { c.Strategy = "esgd" }, 4, "known: asgd, "},
		{"zero batch", func(c *Config) { c.Batch = 0 }, 4, "Config.Batch"},
		{"negative lr", func(c *Config) { c.LR = -1 }, 4, "Config.LR"},
		{"momentum one", func(c *Config) { c.Momentum = 1 }, 4, "Config.Momentum"},
		{"bad reduction", func(c *Config) { c.GradReduction = "avg" }, 4, "Config.GradReduction"},
		{"target above one", func(c *Config) { c.TargetAcc = 1.5 }, 4, "Config.TargetAcc"},
		{"no bound", func(c *Config) { c.Epochs = 0 }, 4, "no bound"},
		{"eval both", func(c *Config) { c.Eval.Interval = time.Second }, 4, "exactly one"},
		{"slowdown count", func(c *Config) { c.Slowdown = []float64{1, 2} }, 4, "2 factors for 4 ranks"},
		{"slowdown below one", func(c *Config) { c.Slowdown = []float64{1, 0.5} }, 2, "rank 1"},
		{"step sleep count", func(c *Config) { c.StepSleep = []time.Duration{0} }, 3, "1 entries for 3 ranks"},
		{"negative step sleep", func(c *Config) { c.StepSleep = []time.Duration{0, -1} }, 2, "rank 1"},
		{"too many servers", func(c *Config) { c.Strategy, c.Options = "asgd", &ASGDOptions{PSPlacement{PSServers: 5}} }, 4, "--ps-servers"},
		{"options of another strategy", func(c *Config) { c.Strategy, c.Options = "esync", &ASGDOptions{} }, 4, "want *trainer.ESyncConfig"},
		{"no ranks", func(c *Config) {}, 0, "job size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := Builtin().Validate(&c, tc.size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseEvalEvery(t *testing.T) {
	cases := []struct {
		in      string
		want    EvalEvery
		wantErr bool
	}{
		{"20", EvalEvery{Rounds: 20}, false},
		{" 5s ", EvalEvery{Interval: 5 * time.Second}, false},
		{"250ms", EvalEvery{Interval: 250 * time.Millisecond}, false},
		{"0", EvalEvery{}, true},
		{"-3", EvalEvery{}, true},
		{"often", EvalEvery{}, true},
	}
	for _, tc := range cases {
		got, err := ParseEvalEvery(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseEvalEvery(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseLists(t *testing.T) {
	f, err := ParseFloatList("slowdown", "1, 1,2,4")
	if err != nil || len(f) != 4 || f[3] != 4 {
		t.Fatalf("ParseFloatList: %v %v", f, err)
	}
	if _, err := ParseFloatList("slowdown", "1,x"); err == nil || !strings.Contains(err.Error(), "--slowdown entry 1") {
		t.Fatalf("bad entry: err = %v", err)
	}
	d, err := ParseMillisList("step-sleep", "0,0,10,1.5s,2.5")
	want := []time.Duration{0, 0, 10 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Microsecond}
	if err != nil || len(d) != len(want) {
		t.Fatalf("ParseMillisList: %v %v", d, err)
	}
	for i := range want {
		if d[i] != want[i] {
			t.Errorf("entry %d = %v, want %v", i, d[i], want[i])
		}
	}
	if _, err := ParseMillisList("step-sleep", "5,soon"); err == nil || !strings.Contains(err.Error(), "--step-sleep entry 1") {
		t.Fatalf("bad entry: err = %v", err)
	}
	if l, err := ParseMillisList("step-sleep", ""); l != nil || err != nil {
		t.Fatalf("empty list: %v %v", l, err)
	}
}
