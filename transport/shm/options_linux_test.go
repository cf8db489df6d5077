package shm

import "testing"

// TestOpenerTakesCreatorsRingSize: the two ends of a pipe agree on its ring size whatever the
// opener asks for, because only the creator's counts.
func TestOpenerTakesCreatorsRingSize(t *testing.T) {
	for _, tc := range []struct{ create, open int }{
		{MinRingSize, DefaultRingSize},
		{DefaultRingSize, MinRingSize},
		{256 << 10, 0},
		{0, 128 << 10},
	} {
		dir := t.TempDir()
		seg, err := Create(Options{Dir: dir, RingSize: tc.create})
		if err != nil {
			t.Fatal(err)
		}
		other, err := Open(seg.Name(), Options{Dir: dir, RingSize: tc.open})
		if err != nil {
			seg.Close()
			t.Fatal(err)
		}
		want := tc.create
		if want == 0 {
			want = DefaultRingSize
		}
		if seg.RingSize() != want || other.RingSize() != want {
			t.Errorf("created with %d, opened with %d: ring sizes %d and %d, want %d", tc.create, tc.open, seg.RingSize(), other.RingSize(), want)
		}
		other.Close()
		seg.Close()
	}
}
