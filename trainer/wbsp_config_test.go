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

func TestPSSyncConfigValidation(t *testing.T) {
	cases := []struct {
		p   PSSyncConfig
		err string
	}{
		{PSSyncConfig{}, ""},
		{PSSyncConfig{WBSPApply: "immediate", WBSPSlowRank: intPtr(2), DCASGDVariant: "mxnet", Staleness: intPtr(0)}, ""},
		{PSSyncConfig{WBSPApply: "later"}, "--wbsp-apply"},
		{PSSyncConfig{WBSPSlowRank: intPtr(3)}, "--wbsp-slow-rank"},
		{PSSyncConfig{WBSPSlowRank: intPtr(-1)}, "--wbsp-slow-rank"},
		{PSSyncConfig{DCASGDVariant: "tf"}, "--dcasgd-variant"},
		{PSSyncConfig{DCASGDLambda: -1}, "--dcasgd-lambda"},
		{PSSyncConfig{Staleness: intPtr(-2)}, "--staleness"},
		{PSSyncConfig{SSPPull: "sometimes"}, "--ssp-pull"},
		{PSSyncConfig{SSPPull: "lazy", Staleness: intPtr(0)}, "--staleness ≥ 1"},
		{PSSyncConfig{PSRanks: []int{2, 0}}, ""},
		{PSSyncConfig{PSRanks: []int{3}}, "--ps-ranks: rank 3 out of range"},
		{PSSyncConfig{PSRanks: []int{-1}}, "--ps-ranks: rank -1 out of range"},
		{PSSyncConfig{PSRanks: []int{1, 1}}, "listed twice"},
	}
	for _, tc := range cases {
		cfg := Config{Strategy: "ssp", PSSync: tc.p}
		cfg.Defaults()
		err := cfg.Validate(3)
		if tc.err == "" && err != nil {
			t.Errorf("%+v: %v", tc.p, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: err %v, want one mentioning %q", tc.p, err, tc.err)
		}
	}
	both := Config{Strategy: "wbsp", PSServers: 2, PSSync: PSSyncConfig{PSRanks: []int{1}}}
	both.Defaults()
	if err := both.Validate(3); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("--ps-ranks with --ps-servers: err %v, want one saying not both", err)
	}
	for _, tc := range []struct {
		servers int
		ranks   []int
		want    []int
	}{{0, nil, []int{0}}, {2, nil, []int{0, 1}}, {0, []int{2, 0}, []int{2, 0}}} {
		c := Config{PSServers: tc.servers, PSSync: PSSyncConfig{PSRanks: tc.ranks}}
		if got := c.ServerRanks(); !slices.Equal(got, tc.want) {
			t.Errorf("ServerRanks with --ps-servers %d --ps-ranks %v = %v, want %v", tc.servers, tc.ranks, got, tc.want)
		}
	}
	cfg := Config{Strategy: "dcasgd"}
	cfg.Defaults()
	if p := cfg.PSSync; p.DCASGDLambda != DefaultDCASGDLambda || p.WBSPApply != "buffered" || p.DCASGDVariant != "paper" ||
		p.SSPPull != "every" || p.StalenessBound() != DefaultStaleness {
		t.Errorf("defaults: %+v", p)
	}
}
