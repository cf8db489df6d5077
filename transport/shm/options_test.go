package shm

import (
	"strings"
	"testing"
)

func TestHostRingSize(t *testing.T) {
	const def = DefaultHostRingBudget
	cases := []struct {
		ranks  int
		budget int64
		want   int
	}{
		{1, 0, DefaultRingSize},
		{2, 0, DefaultRingSize},
		{4, 0, DefaultRingSize},
		{16, def, DefaultRingSize}, // 240 rings × 2 MiB = 480 MiB
		{23, 0, DefaultRingSize},   // 506 rings × 2 MiB = 1012 MiB
		{24, 0, 1 << 20},           // 552 rings: 2 MiB would take 1104 MiB
		{32, 0, 1 << 20},           // 992 rings × 1 MiB = 992 MiB
		{33, 0, 512 << 10},
		{64, 0, 256 << 10}, // 4032 rings × 256 KiB = 1008 MiB
		{128, 0, MinRingSize},
		{129, 0, MinRingSize}, // the floor: 16512 rings × 64 KiB exceed the budget
		{1000, 0, MinRingSize},
		{32, 512 << 20, 512 << 10},
		{64, 512 << 20, 128 << 10},
		{3, 6 * 256 << 10, 256 << 10},
		{9, 20 << 20, 256 << 10}, // 72 rings × 256 KiB = 18 MiB
		{9, 1 << 20, MinRingSize},
		{9, 1 << 40, DefaultRingSize},
	}
	for _, tc := range cases {
		got, err := HostRingSize(tc.ranks, tc.budget)
		if err != nil || got != tc.want {
			t.Errorf("HostRingSize(%d, %d) = %d, %v; want %d", tc.ranks, tc.budget, got, err, tc.want)
		}
	}
	for _, budget := range []int64{0, 1 << 20, 7 << 20, 100 << 20, 1 << 30} {
		b := budget
		if b == 0 {
			b = def
		}
		prev := DefaultRingSize
		for n := 1; n <= 64; n++ {
			got, err := HostRingSize(n, budget)
			if err != nil {
				t.Fatalf("HostRingSize(%d, %d): %v", n, budget, err)
			}
			if (Options{RingSize: got}).Validate() != nil || got > DefaultRingSize {
				t.Fatalf("HostRingSize(%d, %d) = %d: not a valid ring size at most %d", n, budget, got, DefaultRingSize)
			}
			if got > prev {
				t.Errorf("HostRingSize(%d, %d) = %d grew from %d at one rank fewer", n, budget, got, prev)
			}
			rings := int64(n) * int64(n-1)
			if got > MinRingSize && rings*int64(got) > b {
				t.Errorf("HostRingSize(%d, %d) = %d: %d rings exceed the budget", n, budget, got, rings)
			}
			if got < DefaultRingSize && rings*int64(2*got) <= b {
				t.Errorf("HostRingSize(%d, %d) = %d: twice as large would fit", n, budget, got)
			}
			prev = got
		}
	}
	for _, tc := range []struct {
		ranks  int
		budget int64
		want   string
	}{{0, 0, "0 ranks"}, {-3, 0, "-3 ranks"}, {4, -1, "budget -1"}} {
		if _, err := HostRingSize(tc.ranks, tc.budget); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("HostRingSize(%d, %d) = %v; want an error naming %q", tc.ranks, tc.budget, err, tc.want)
		}
	}
}
