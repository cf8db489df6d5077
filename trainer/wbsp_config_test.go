package trainer

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHeteroProfileSleep(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		profile string
		size    int
		tFast   time.Duration
		want    []time.Duration
		err     string
	}{
		{"h1", 4, 2 * ms, []time.Duration{0, 10 * ms, 0, 10 * ms}, ""},
		{"h2", 3, 2 * ms, []time.Duration{0, 20 * ms, 0}, ""},
		{"h3", 1, 2 * ms, []time.Duration{0}, ""},
		{"h3", 6, ms, []time.Duration{0, 15 * ms, 0, 15 * ms, 0, 15 * ms}, ""},
		{"h4", 4, ms, nil, "h1, h2 or h3"},
		{"h2", 0, ms, nil, "number of ranks"},
		{"h2", 4, 0, nil, "positive fast step time"},
	}
	for _, tc := range cases {
		got, err := HeteroProfileSleep(tc.profile, tc.size, tc.tFast)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s/%d/%v: err %v, want one mentioning %q", tc.profile, tc.size, tc.tFast, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s/%d/%v = %v, %v; want %v", tc.profile, tc.size, tc.tFast, got, err, tc.want)
		}
	}
}

func TestPSOptionsValidation(t *testing.T) {
	cases := []struct {
		strategy string
		o        Options
		err      string
	}{
		{"ssp", &SSPOptions{}, ""},
		{"wbsp", &WBSPOptions{Apply: "immediate", SlowRank: intPtr(2)}, ""},
		{"dcasgd", &DCASGDOptions{Variant: "mxnet"}, ""},
		{"ssp", &SSPOptions{Staleness: intPtr(0)}, ""},
		{"wbsp", &WBSPOptions{Apply: "later"}, "--wbsp-apply"},
		{"wbsp-opt", &WBSPOptions{SlowRank: intPtr(3)}, "--wbsp-slow-rank"},
		{"dcasgd", &DCASGDOptions{Variant: "tf"}, "--dcasgd-variant"},
		{"dcasgd", &DCASGDOptions{Lambda: -1}, "--dcasgd-lambda"},
		{"ssp", &SSPOptions{Staleness: intPtr(-2)}, "--staleness"},
		{"ssp", &SSPOptions{Pull: "sometimes"}, "--ssp-pull"},
		{"ssp", &SSPOptions{Pull: "lazy", Staleness: intPtr(0)}, "--staleness ≥ 1"},
		{"asgd", &ASGDOptions{PSPlacement{PSRanks: []int{2, 0}}}, ""},
		{"ssp", &SSPOptions{PSPlacement: PSPlacement{PSRanks: []int{3}}}, "--ps-ranks: rank 3 out of range"},
		{"sync-switch", &SyncSwitchConfig{PSPlacement: PSPlacement{PSRanks: []int{-1}}}, "--ps-ranks: rank -1 out of range"},
		{"wbsp", &WBSPOptions{PSPlacement: PSPlacement{PSRanks: []int{1, 1}}}, "listed twice"},
		{"wbsp", &WBSPOptions{PSPlacement: PSPlacement{PSServers: 2, PSRanks: []int{1}}}, "not both"},
		{"asgd", &ASGDOptions{PSPlacement{PSServers: 4}}, "--ps-servers"},
	}
	for _, tc := range cases {
		cfg := Config{Strategy: tc.strategy, Collective: "ps", Options: tc.o}
		cfg.Defaults()
		err := Builtin().Validate(&cfg, 3)
		if tc.err == "" && err != nil {
			t.Errorf("%s %+v: %v", tc.strategy, tc.o, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %+v: err %v, want one mentioning %q", tc.strategy, tc.o, err, tc.err)
		}
	}
	for _, tc := range []struct {
		servers int
		ranks   []int
		want    []int
	}{{0, nil, []int{0}}, {2, nil, []int{0, 1}}, {0, []int{2, 0}, []int{2, 0}}} {
		p := PSPlacement{PSServers: tc.servers, PSRanks: tc.ranks}
		if got := p.ServerRanks(); !slices.Equal(got, tc.want) {
			t.Errorf("ServerRanks with --ps-servers %d --ps-ranks %v = %v, want %v", tc.servers, tc.ranks, got, tc.want)
		}
	}
	for _, name := range []string{"dcasgd", "ssp", "wbsp"} {
		cfg := Config{Strategy: name}
		cfg.Defaults()
		if err := Builtin().Configure(&cfg); err != nil {
			t.Fatal(err)
		}
		switch o := cfg.Options.(type) {
		case *DCASGDOptions:
			if o.Lambda != DefaultDCASGDLambda || o.Variant != "paper" {
				t.Errorf("dcasgd defaults: %+v", o)
			}
		case *SSPOptions:
			if o.Pull != "every" || o.StalenessBound() != DefaultStaleness {
				t.Errorf("ssp defaults: %+v", o)
			}
		case *WBSPOptions:
			if o.Apply != "buffered" || o.SlowRank != nil {
				t.Errorf("wbsp defaults: %+v", o)
			}
		}
	}
}
