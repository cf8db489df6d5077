package workload

import (
	"strings"
	"testing"
)

func TestWorkload(t *testing.T) {
	wl := Workload{}
	wl.Defaults()
	if wl.Model != "mlp" || wl.Shard != "iid" {
		t.Fatalf("defaults %+v, want mlp on iid shards", wl)
	}
	for _, tc := range []struct {
		wl   Workload
		want string
	}{
		{Workload{Shard: "dirichlet", Model: "mlp"}, "--shard"},
		{Workload{Shard: "iid"}, "--model is empty"},
	} {
		if err := tc.wl.Validate(2); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", tc.wl, err, tc.want)
		}
	}
}

func TestDevices(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		size    int
		want    []string // DeviceFor(0..size-1)
		wantErr string
	}{
		{"", 3, []string{"cpu", "cpu", "cpu"}, ""},
		{"cpu", 2, []string{"cpu", "cpu"}, ""},
		{"cuda:1", 2, []string{"cuda:1", "cuda:1"}, ""},
		{"cuda:0, cpu,cpu,cpu", 4, []string{"cuda:0", "cpu", "cpu", "cpu"}, ""},
		{"cpu,cpu,cpu", 2, nil, "lists 3 devices for 2 ranks"},
		{"gpu", 2, nil, `unknown device "gpu"`},
		{"cuda:x", 1, nil, `unknown device "cuda:x"`},
	} {
		devs, err := ParseDevices(tc.flag)
		if err == nil {
			wl := Workload{Devices: devs}
			wl.Defaults()
			err = wl.Validate(tc.size)
		}
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("--device %q: err = %v, want %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--device %q: %v", tc.flag, err)
		}
		wl := Workload{Devices: devs}
		for r, want := range tc.want {
			if got := wl.DeviceFor(r); got != want {
				t.Errorf("--device %q: rank %d device %q, want %q", tc.flag, r, got, want)
			}
		}
	}
}
