package trainer

import (
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
