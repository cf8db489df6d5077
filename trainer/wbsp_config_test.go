package trainer

import (
	"reflect"
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
	cfg := Config{Strategy: "dcasgd"}
	cfg.Defaults()
	if p := cfg.PSSync; p.DCASGDLambda != DefaultDCASGDLambda || p.WBSPApply != "buffered" || p.DCASGDVariant != "paper" ||
		p.SSPPull != "every" || p.StalenessBound() != DefaultStaleness {
		t.Errorf("defaults: %+v", p)
	}
}
