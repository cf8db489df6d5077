package trainer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRegister(t *testing.T) {
	ssgdFactory := Factory{Options: noOptions, New: func(*Config) (Strategy, error) { return &ssgd{}, nil }}
	cases := []struct {
		name string
		f    Factory
		want string
	}{
		{"mine", ssgdFactory, ""},
		{"ssgd", ssgdFactory, `strategy "ssgd" registered twice`},
		{"", ssgdFactory, "empty name"},
		{"half", Factory{Options: noOptions}, "needs both Options and New"},
	}
	r := Builtin()
	for _, tc := range cases {
		err := r.Register(tc.name, tc.f)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Register(%q) = %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
	if names := strings.Join(r.Names(), ","); !strings.Contains(names, "local,mine,ssgd") {
		t.Errorf("names %s: the registered strategy is missing", names)
	}
	cfg := Config{Strategy: "mine"}
	cfg.Defaults()
	if _, err := r.New(&cfg); err != nil {
		t.Fatal(err)
	}
	nilOpts := Config{Strategy: "esync", LR: 0.3, Options: (*ESyncConfig)(nil)}
	if err := Builtin().Configure(&nilOpts); err != nil || nilOpts.Options.(*ESyncConfig).LocalLR != 0.3 {
		t.Errorf("nil *ESyncConfig: err %v, options %+v; want ESync's defaults", err, nilOpts.Options)
	}
	if _, err := Builtin().New(&cfg); err == nil || !strings.Contains(err.Error(), "known: asgd,") {
		t.Errorf("a strategy of another registry: err = %v, want unknown", err)
	}
}

// TestCheckOptionFlags refuses a strategy option given for a strategy that does not take it,
// naming the flag and the strategies it belongs to, and accepts a strategy's own.
func TestCheckOptionFlags(t *testing.T) {
	given := func(flags ...string) func(string) bool {
		return func(f string) bool { return slices.Contains(flags, f) }
	}
	for _, tc := range []struct {
		strategy string
		set      []string
		want     string // "" accepts
	}{
		{"ssgd", []string{"esync-epsilon"}, "--esync-epsilon is an option of --sync esync; --sync ssgd does not take it"},
		{"esync", []string{"esync-epsilon", "local-lr"}, ""},
		{"asgd", []string{"ps-ranks"}, ""},
		{"esync", []string{"ps-servers", "wbsp-apply"}, "--ps-servers is an option of --sync asgd, dcasgd, ssp, sync-switch, wbsp, wbsp-opt; --wbsp-apply is an option of --sync wbsp, wbsp-opt; --sync esync does not take it"},
		{"ssgd", nil, ""},
		{"bsp", nil, `Config.Strategy "bsp": unknown`},
	} {
		err := Builtin().CheckOptionFlags(tc.strategy, given(tc.set...))
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s with %v: err = %v, want %q", tc.strategy, tc.set, err, tc.want)
		}
	}
}

// TestInFlags names the Config fields of the library's errors as the command line's flags.
func TestInFlags(t *testing.T) {
	cfg := Config{Strategy: "asgd", Collective: "ring", Batch: 8, LR: 0.1, MaxRounds: 1}
	err := Builtin().Validate(&cfg, 2)
	if got := InFlags(err); got == nil || got.Error() != "trainer: --collective ring: --sync asgd runs only over ps" || !errors.Is(got, err) {
		t.Errorf("InFlags(%v) = %v", err, got)
	}
	cfg = Config{Strategy: "ssgd", Batch: 8, MaxRounds: 1}
	if got := InFlags(Builtin().Validate(&cfg, 2)); got == nil || !strings.HasPrefix(got.Error(), "trainer: --lr must be a positive number, got 0") {
		t.Errorf("zero lr: %v", got)
	}
}
